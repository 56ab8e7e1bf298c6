"""The matmul starter against the upcast reference: shapes, dtypes, distributions, traps,
tunables."""

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
    load_starter,
    load_starter_with,
    nan_filled_allocations,
    seeded_inputs,
    starter_space,
)

from autokernel.ops import get_spec
from autokernel.ops.spec import DISTRIBUTIONS, dtype_name

SPEC = get_spec("matmul")
KERNEL = load_starter("matmul")
DTYPE_TOLERANCES = dtype_tolerance_params(SPEC)
# Ragged in every dim, several K tiles at every BLOCK_K; a single row; a single column. With the
# smallest blocks each spans several tiles, so grouping, wrap-around rows and split-K all engage.
TUNABLE_SHAPES = ((70, 45, 130), (1, 33, 257), (19, 1, 64))
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


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES)
@pytest.mark.parametrize("shape", SPEC.cpu_sweep + SPEC.cpu_edge_shapes, ids=str)
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


@pytest.mark.parametrize("shape, blocks", [((40, 24, 72), "starter"), ((17, 33, 96), "starter"),
                                           ((40, 24, 72), "small_blocks")], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial(case, dtype, shape, blocks, device, small_block_kernel) -> None:
    kernel = KERNEL if blocks == "starter" else small_block_kernel
    assert_adversarial_case_passes(SPEC, kernel.kernel_fn, case, shape, dtype, device,
                                   f"{case.name} {shape} {blocks} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (16, 4096, 4096), (4095, 4097, 1023)],
                         ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial_gpu(case, dtype, shape) -> None:
    assert_adversarial_case_passes(SPEC, KERNEL.kernel_fn, case, shape, dtype, "cuda")


def test_common_offset_catches_low_precision_accumulation(device) -> None:
    """The cancellation case must be able to fail: fp16 partial sums are far outside tolerance."""
    case = next(c for c in SPEC.adversarial if c.name == "common_offset")
    a, b = case.make_inputs((32, 32, 96), torch.float16, device, torch.Generator(device=device))
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
    a, b = case.make_inputs((64, 96, 1024), torch.float32, device, torch.Generator(device=device))
    tf32 = (_round_to_tf32(a).double() @ _round_to_tf32(b).double()).float()
    with pytest.raises(AssertionError):
        assert_matches_reference(SPEC, lambda *_: tf32, (a, b), f"{name} through tf32")


def test_non_contiguous_inputs(device) -> None:
    a, b = _inputs((40, 36, 50), torch.float16, device)
    column_major_a = a.t().contiguous().t()
    assert not column_major_a.is_contiguous()
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (column_major_a, b), "column-major A")
    wide_b = torch.cat([b, b], dim=1)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (a, wide_b[:, ::2]), "every other column of B")


def test_deterministic(device, tmp_path: Path) -> None:
    assert_deterministic(KERNEL.kernel_fn, _inputs((70, 45, 130), torch.bfloat16, device))
    split = load_starter_with("matmul", {"SPLIT_K": 4, "BLOCK_K": 32}, tmp_path)
    assert_deterministic(split.kernel_fn, _inputs((33, 40, 200), torch.float32, device))


@pytest.mark.parametrize("split_k", [1, 4])
def test_writes_every_output_element(split_k, device, tmp_path: Path) -> None:
    module = load_starter_with("matmul", {"SPLIT_K": split_k, "BLOCK_M": 16}, tmp_path)
    args = _inputs((37, 50, 150), torch.float32, device)
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
    for shape in ((1000, 1100, 1300), (16, 4096, 4096)):
        args = _inputs(shape, dtype, "cuda")
        assert_matches_reference(SPEC, module.kernel_fn, args, f"{tunables} {shape} {dtype}")


def test_tunable_sample_covers_every_value() -> None:
    space = starter_space("matmul")
    for name, values in space.items():
        assert {t[name] for t in TUNABLE_COMBINATIONS} == set(values), name


@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_stock_agrees_with_reference(dtype, device) -> None:
    args = _inputs((33, 20, 48), dtype, device, "uniform")
    assert_matches_reference(SPEC, SPEC.stock, args, f"stock {dtype}")


def test_shrinks_until_the_launch_fits(device, tmp_path: Path, monkeypatch) -> None:
    """Out of shared memory: fewer stages, then a smaller BLOCK_K, until the launch fits."""
    module = load_starter_with("matmul", {"BLOCK_K": 128, "NUM_STAGES": 4}, tmp_path)
    picky = _RefusesLargeLaunches(module.matmul_kernel, "BLOCK_K", max_block=32)
    monkeypatch.setattr(module, "matmul_kernel", picky)
    args = _inputs((40, 30, 200), torch.float32, device)
    assert_matches_reference(SPEC, module.kernel_fn, args, "after shrinking")
    assert picky.launches[-1] == (32, 1)
    assert picky.launches == sorted(picky.launches, reverse=True)  # only ever shrinks


def test_rejects_mismatched_operands(device) -> None:
    a, b = _inputs((8, 8, 16), torch.float16, device)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(a, b[:8])
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(a, b.float())
