"""The matmul starter against the upcast reference: shapes (2-D and batched, B x M x N x K),
operand layouts, dtypes, distributions, traps, tunables."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import triton
from starter_checks import (
    assert_adversarial_case_passes,
    assert_deterministic,
    assert_matches_reference,
    covering_sample,
    dtype_tolerance_params,
    hopper_compile_problems,
    load_starter,
    load_starter_with,
    nan_filled_allocations,
    seeded_inputs,
    starter_space,
    sweep_cases,
)

from autokernel.ops import get_spec
from autokernel.ops.spec import DISTRIBUTIONS, dtype_name

SPEC = get_spec("matmul")
KERNEL = load_starter("matmul")
DTYPE_TOLERANCES = dtype_tolerance_params(SPEC)
# Ragged in every dim, several K tiles at every BLOCK_K; a single row; a single column; a batch.
# With the smallest blocks each spans several tiles, so grouping, wrap-around rows and split-K
# all engage.
TUNABLE_SHAPES = ((1, 70, 45, 130), (1, 1, 33, 257), (1, 19, 1, 64), (3, 21, 40, 72))
TUNABLE_COMBINATIONS = covering_sample(starter_space("matmul"), count=12, seed=0)
# The default blocks cover a CPU-sized problem in one tile; the adversarial cases also meet the
# smallest blocks, so multi-block paths run (several row/column tiles, ragged K tiles, split-K).
SMALL_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 2}


_inputs = functools.partial(seeded_inputs, SPEC)


class _RefusesLargeLaunches:
    """Stands in for a @triton.jit kernel: a launch with a block (`block_name`) over `max_block`
    or more than one pipeline stage fails as on a GPU short of shared memory."""

    def __init__(self, kernel, block_name: str, max_block: int) -> None:
        self.kernel, self.block_name, self.max_block = kernel, block_name, max_block
        self.launches: list[tuple[int, int]] = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            block, stages = kwargs[self.block_name], kwargs["num_stages"]
            self.launches.append((block, stages))
            if block > self.max_block or stages > 1:
                raise triton.runtime.errors.OutOfResources(1 << 20, 1 << 17, "shared memory")
            return self.kernel[grid](*args, **kwargs)

        return launch


@pytest.mark.parametrize("shape, dtype, atol, rtol, distribution", sweep_cases(SPEC))
def test_matches_reference_small(shape, dtype, atol, rtol, distribution, device) -> None:
    args = _inputs(shape, dtype, device, distribution)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} {dtype} {distribution}")


@pytest.mark.gpu
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES)
@pytest.mark.parametrize("shape", SPEC.sweep + SPEC.edge_shapes, ids=str)
def test_matches_reference_gpu(shape, dtype, atol, rtol, distribution) -> None:
    args = _inputs(shape, dtype, "cuda", distribution)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args, f"{shape} {dtype} {distribution}")


@pytest.fixture(scope="module")
def small_block_kernel(tmp_path_factory: pytest.TempPathFactory):
    return load_starter_with("matmul", SMALL_BLOCKS, tmp_path_factory.mktemp("blocks"))


@pytest.mark.parametrize("shape, blocks", [((1, 40, 24, 72), "starter"),
                                           ((1, 17, 33, 96), "starter"),
                                           ((1, 40, 24, 72), "small_blocks"),
                                           ((4, 20, 36, 40), "starter"),
                                           ((4, 20, 36, 40), "small_blocks")], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial(case, dtype, shape, blocks, device, small_block_kernel) -> None:
    kernel = KERNEL if blocks == "starter" else small_block_kernel
    assert_adversarial_case_passes(SPEC, kernel.kernel_fn, case, shape, dtype, device,
                                   f"{case.name} {shape} {blocks} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 4096, 4096, 4096), (1, 16, 4096, 4096),
                                   (1, 4095, 4097, 1023), (1024, 512, 512, 96)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial_gpu(case, dtype, shape) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, "cuda")


def test_common_offset_catches_low_precision_accumulation(device) -> None:
    """The cancellation case must be able to fail: fp16 partial sums are far outside tolerance."""
    case = next(c for c in SPEC.adversarial if c.name == "common_offset")
    a, b = case.make_inputs((1, 32, 32, 96), torch.float16, device,
                            torch.Generator(device=device))
    running = torch.zeros(32, 32, dtype=torch.float16, device=device)
    for k in range(0, 96, 16):  # what a kernel keeping its accumulator in fp16 computes
        running = (running.float() + a[:, k:k + 16].float() @ b[k:k + 16].float()).half()
    with pytest.raises(AssertionError):
        assert_matches_reference(SPEC, lambda *_: running, (a, b), "fp16 accumulator")


def _round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """What a tf32 tensor core sees of an fp32 operand: 10 mantissa bits (round to nearest)."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


@pytest.mark.parametrize("name", ["wide_dynamic_range", "common_offset"])
def test_fp32_cases_catch_a_tf32_shortcut(name, device) -> None:
    """The fp32 cases are scaled down so a correct ieee kernel passes at K = 4096; they must
    still fail a kernel that rounds fp32 operands to tf32 (emulated, so this runs on CPU too)."""
    case = next(c for c in SPEC.adversarial if c.name == name)
    a, b = case.make_inputs((1, 64, 96, 1024), torch.float32, device,
                            torch.Generator(device=device))
    tf32 = (_round_to_tf32(a).double() @ _round_to_tf32(b).double()).float()
    with pytest.raises(AssertionError):
        assert_matches_reference(SPEC, lambda *_: tf32, (a, b), f"{name} through tf32")


def test_non_contiguous_inputs(device) -> None:
    a, b = _inputs((1, 40, 36, 50), torch.float16, device)
    column_major_a = a.t().contiguous().t()
    assert not column_major_a.is_contiguous()
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (column_major_a, b), "column-major A")
    wide_b = torch.cat([b, b], dim=1)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (a, wide_b[:, ::2]), "every other column of B")


def test_deterministic(device, tmp_path: Path) -> None:
    assert_deterministic(KERNEL.kernel_fn, _inputs((1, 70, 45, 130), torch.bfloat16, device))
    split = load_starter_with("matmul", {"SPLIT_K": 4, "BLOCK_K": 32}, tmp_path)
    assert_deterministic(split.kernel_fn, _inputs((1, 33, 40, 200), torch.float32, device))
    assert_deterministic(split.kernel_fn, _inputs((3, 20, 24, 100), torch.float32, device))


@pytest.mark.parametrize("shape", [(1, 37, 50, 150), (3, 37, 20, 100)], ids=str)
@pytest.mark.parametrize("split_k", [1, 4])
def test_writes_every_output_element(split_k, shape, device, tmp_path: Path) -> None:
    module = load_starter_with("matmul", {"SPLIT_K": split_k, "BLOCK_M": 16}, tmp_path)
    args = _inputs(shape, torch.float32, device)
    with nan_filled_allocations():
        assert_matches_reference(SPEC, module.kernel_fn, args, f"split {split_k} over NaN garbage")


@pytest.mark.parametrize("tunables", TUNABLE_COMBINATIONS,
                         ids=lambda t: "-".join(map(str, t.values())))
def test_tunable_combination_stays_correct(tunables, device, tmp_path: Path) -> None:
    module = load_starter_with("matmul", tunables, tmp_path)
    for i, shape in enumerate(TUNABLE_SHAPES):
        dtype = SPEC.dtypes[i % len(SPEC.dtypes)]
        args = _inputs(shape, dtype, device, DISTRIBUTIONS[i], seed=i)
        assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} {shape} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("tunables", covering_sample(starter_space("matmul"), count=12, seed=1)
                         # the largest tiles: fp32 must shrink even one stage to fit
                         + [{"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "NUM_STAGES": 5,
                             "FP32_PRECISION": "tf32x3"}],
                         ids=lambda t: "-".join(map(str, t.values())))
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_tunable_combination_compiles_and_stays_correct_gpu(tunables, dtype, tmp_path) -> None:
    """Compiles for real (shared-memory limits, tf32x3): the interpreter checks neither."""
    module = load_starter_with("matmul", tunables, tmp_path)
    for shape in ((1, 1000, 1100, 1300), (1, 16, 4096, 4096), (96, 257, 250, 96)):
        args = _inputs(shape, dtype, "cuda")
        assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} {shape} {dtype}")


def test_tunable_sample_covers_every_value() -> None:
    space = starter_space("matmul")
    for name, values in space.items():
        assert {t[name] for t in TUNABLE_COMBINATIONS} == set(values), name


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_stock_agrees_with_reference(dtype, device) -> None:
    args = _inputs((3, 33, 20, 48), dtype, device, "uniform")
    assert_matches_reference(SPEC, SPEC.stock, args, f"stock {dtype}")


def test_shrinks_until_the_launch_fits(device, tmp_path: Path, monkeypatch) -> None:
    """Out of shared memory: fewer stages, then a smaller BLOCK_K, until the launch fits."""
    module = load_starter_with("matmul", {"BLOCK_K": 128, "NUM_STAGES": 4}, tmp_path)
    picky = _RefusesLargeLaunches(module.matmul_kernel, "BLOCK_K", max_block=32)
    monkeypatch.setattr(module, "matmul_kernel", picky)
    args = _inputs((1, 40, 30, 200), torch.float32, device)
    assert_matches_reference(SPEC, module.kernel_fn, args, "after shrinking")
    assert picky.launches[-1] == (32, 1)
    assert picky.launches == sorted(picky.launches, reverse=True)  # only ever shrinks


def test_rejects_mismatched_operands(device) -> None:
    a, b = _inputs((1, 8, 8, 16), torch.float16, device)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(a, b[:8])
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(a, b.float())
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(a, b[:, 0])  # a vector is not a matrix
    a3, b3 = _inputs((3, 8, 8, 16), torch.float16, device)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(a3, b3[:2])  # batches of 3 and 2 do not broadcast


# ---------------------------------------------------------------------------------------------
# Batched operands: every layout torch.matmul takes and a model hands over


def _fused_qkv_views(batch: int, heads: int, seq: int, head_dim: int, dtype: torch.dtype,
                     device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v [batch, heads, seq, head_dim] split out of one projection, as minGPT does."""
    generator = torch.Generator(device=device).manual_seed(3)
    qkv = torch.randn(batch, seq, 3 * heads * head_dim, generator=generator, device=device)
    q, k, v = (t.unflatten(-1, (heads, head_dim)).transpose(1, 2)
               for t in (qkv / head_dim ** 0.25).to(dtype).split(heads * head_dim, dim=-1))
    return q, k, v


def _layouts(dtype: torch.dtype, device: str) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator(device=device).manual_seed(2)

    def r(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator, device=device) / 5).to(dtype)

    q, k, v = _fused_qkv_views(2, 3, 19, 16, dtype, device)
    scores = (q.float() @ k.float().transpose(-2, -1)).softmax(-1).to(dtype)
    return {
        "bmm": (r(3, 20, 40), r(3, 40, 24)),
        "q_at_k_transposed": (q, k.transpose(-2, -1)),
        "probs_at_v": (scores, v),
        "broadcast_batch": (r(4, 1, 7, 24), r(3, 24, 9)),
        "x_at_weight": (r(2, 5, 7, 24), r(24, 9)),
        "x_at_weight_t": (r(2, 5, 7, 24), r(9, 24).t()),
        "one_row_per_batch": (r(6, 1, 40), r(40, 17)),
        "expanded_weight": (r(3, 7, 24), r(24, 9).expand(3, 24, 9)),
        # Three batch dims no stride merges: the one layout the starter copies first.
        "unmergeable_5d": (r(2, 3, 2, 7, 24).transpose(0, 2),
                           r(2, 1, 2, 24, 9).expand(2, 3, 2, 24, 9)),
    }


LAYOUT_NAMES = list(_layouts(torch.float32, "cpu"))


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_batched_layouts_match_torch_matmul(layout, dtype, device) -> None:
    a, b = _layouts(dtype, device)[layout]
    out = assert_matches_reference(SPEC, KERNEL.kernel_fn, (a, b), f"{layout} {dtype}")
    assert out.shape == torch.matmul(a, b).shape and out.is_contiguous()


@pytest.mark.parametrize("tunables", [{"BLOCK_M": 16, "BLOCK_N": 32, "GROUP_M": 4,
                                       "SPLIT_K": 2, "BLOCK_K": 32}], ids=["small_tiles"])
def test_batched_layouts_with_many_tiles(tunables, device, tmp_path: Path) -> None:
    """Several tiles and K ranges per matrix, so tile numbering restarts per batch element."""
    module = load_starter_with("matmul", tunables, tmp_path)
    for layout in ("q_at_k_transposed", "broadcast_batch", "one_row_per_batch"):
        a, b = _layouts(torch.float32, device)[layout]
        assert_matches_reference(SPEC, module.kernel_fn, (a, b), f"{layout} {tunables}")


def test_views_are_read_in_place_and_planning_is_cached(device) -> None:
    """Attention's q @ kᵀ on views of a fused projection launches on the views themselves (two
    batch levels, no copy), x @ W folds its batch into rows, and a repeated call reuses its
    plan."""
    q, k, _ = _fused_qkv_views(2, 3, 19, 16, torch.float16, device)
    plan = KERNEL._plan(q.shape, q.stride(), k.transpose(-2, -1).shape,
                        k.transpose(-2, -1).stride(), q.dtype, q.device)
    assert (plan.outer, plan.inner, plan.m) == (2, 3, 19)
    assert plan.a_strides == q.stride() and plan.b_strides == k.transpose(-2, -1).stride()
    x, w = torch.randn(2, 5, 7, 24), torch.randn(24, 9)
    folded = KERNEL._plan(x.shape, x.stride(), w.shape, w.stride(), x.dtype, x.device)
    assert (folded.outer, folded.inner, folded.m, folded.out_shape) == (1, 1, 70, (2, 5, 7, 9))
    a, b = _inputs((3, 20, 24, 40), torch.float32, device)
    KERNEL.kernel_fn(a, b)
    hits = KERNEL._plan.cache_info().hits
    KERNEL.kernel_fn(a.clone(), b.clone())
    assert KERNEL._plan.cache_info().hits == hits + 1


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_b_transposed_inputs(dtype, device) -> None:
    """The profiler asks for Kᵀ-layout inputs with b_transposed; the starter reads them as they
    are."""
    a, b = _inputs((3, 20, 24, 40), dtype, device, b_transposed=True)
    assert b.shape == (3, 40, 24) and b.stride(-2) == 1
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (a, b), f"b_transposed {dtype}")


def test_empty_batch_and_k_zero(device) -> None:
    empty = KERNEL.kernel_fn(torch.randn(0, 5, 8, device=device), torch.randn(0, 8, 3,
                                                                               device=device))
    assert empty.shape == (0, 5, 3)
    zeros = KERNEL.kernel_fn(torch.randn(2, 5, 0, device=device), torch.randn(2, 0, 3,
                                                                              device=device))
    assert zeros.shape == (2, 5, 3) and not zeros.any()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checked by the GPU tests")
def test_batched_launches_compile_for_hopper(tmp_path: Path) -> None:
    """What the starter launches for batched and 2-D problems, with and without split-K, builds
    for sm_90 without register spills (through Triton's compiler, no GPU needed). Recorded on
    CPU tensors, so the tiles are the upcast variant the interpreter runs."""
    calls = [((4, 64, 48, 40), torch.float16), ((8, 130, 96, 96), torch.bfloat16),
             ((1, 200, 256, 100), torch.float32)]
    problems = hopper_compile_problems("matmul", [{}, {"SPLIT_K": 4, "BLOCK_M": 16,
                                                       "BLOCK_N": 32}], calls, tmp_path,
                                       forbid_spills=True)
    assert not problems, "\n".join(problems)
