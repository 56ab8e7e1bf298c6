"""The flash_attention starter against the upcast reference: shapes, dtypes, distributions, causal
and non-causal, traps, tunables."""

from __future__ import annotations

import functools
import textwrap
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
    sweep_cases,
)

from autokernel.aot import HOPPER_MAX_SHARED_BYTES, check_file, format_result, triton_interprets
from autokernel.kernels import starter_path
from autokernel.ops import get_spec
from autokernel.ops.spec import DISTRIBUTIONS, dtype_name

SPEC = get_spec("flash_attention")
KERNEL = load_starter("flash_attention")
DTYPE_TOLERANCES = dtype_tolerance_params(SPEC)
CAUSAL = [pytest.param(True, id="causal"), pytest.param(False, id="full")]
# S spans several query and key blocks at the smallest blocks and is ragged against all of them;
# a single query; D = 80 (padded head dim); D = 320, tiled (slices ragged against BLOCK_DV 128
# and 256, and against BLOCK_DK 128). Both causal modes run on each.
TUNABLE_SHAPES = ((1, 2, 45, 64), (2, 1, 1, 32), (1, 1, 40, 80), (1, 1, 21, 320))
TUNABLE_COMBINATIONS = covering_sample(starter_space("flash_attention"), count=12, seed=0)
# The default blocks cover a CPU-sized problem in one tile; the adversarial cases also meet the
# smallest blocks, so multi-block paths run (online-softmax rescale, diagonal blocks).
SMALL_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 16}
# Small blocks for heads past the resident limit: several query and key blocks, head-dim slices
# of QKᵀ and output slices that D = 320 leaves ragged (320 = 2.5 x 128).
SMALL_WIDE_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_DK": 128, "BLOCK_DV": 128}
# The tma variant at blocks small enough for several query and key blocks on CPU shapes, at 8
# and at 4 warps.
TMA_SETTINGS = {
    "tma": {"VARIANT": "tma", "BLOCK_M": 16, "BLOCK_N": 16},
    "tma_4_warps": {"VARIANT": "tma", "BLOCK_M": 32, "BLOCK_N": 16, "NUM_WARPS": 4},
}
# Several key blocks, ragged against 16; one query; D = 80 (padded, TMA zero-fills the columns);
# the widest resident head; a 3-head batch.
TMA_DTYPE_TOLERANCES = [p for p in DTYPE_TOLERANCES if p.values[0] != torch.float32]
TMA_SHAPES = ((1, 2, 45, 64), (2, 1, 1, 32), (1, 1, 40, 80), (1, 1, 37, 256), (2, 3, 33, 16))


# The fp64 oracle materialises B·H·S² scores about three times over; GPU-sized checks compare head
# groups of at most this many score bytes, so (1, 32, 8192, 128) fits next to the kernel's run.
ORACLE_SCORE_BYTES = 4 << 30


_inputs = functools.partial(seeded_inputs, SPEC, causal=True, scale=None)


def _assert_matches_reference_by_heads(fn, args, label: str,
                                       score_bytes: int = ORACLE_SCORE_BYTES) -> None:
    """Run fn on the full inputs once, then check its output against the oracle head group by
    head group (attention is independent per batch and head)."""
    q, k, v, causal, scale = args
    out = fn(*args)
    batch, heads, seq_len, _ = q.shape
    step = max(1, min(heads, score_bytes // (batch * seq_len * seq_len * 8)))
    for first in range(0, heads, step):
        group = tuple(t[:, first:first + step] for t in (q, k, v))
        assert_matches_reference(SPEC, lambda *_, first=first: out[:, first:first + step],
                                 (*group, causal, scale), f"{label} heads {first}+")


class _RefusesLargeLaunches:
    """Stands in for a @triton.jit kernel on a GPU short of shared memory: what it compiles
    (warmup) refuses to load when its BLOCK_N is over `max_block` or it has more than one pipeline
    stage, and otherwise runs as the real kernel."""

    def __init__(self, kernel, max_block: int) -> None:
        self.kernel, self.max_block = kernel, max_block
        self.compiles: list[tuple[int, int]] = []

    def warmup(self, *args, grid, num_warps: int, num_stages: int):
        block = args[self.kernel.arg_names.index("BLOCK_N")]
        self.compiles.append((block, num_stages))
        return _PickyCompiledKernel(self.kernel, block > self.max_block or num_stages > 1,
                                    num_warps, num_stages)

    def __getitem__(self, grid):
        raise AssertionError("launched through the JIT, not through its compiled kernel")


class _PickyCompiledKernel:
    def __init__(self, kernel, too_large: bool, num_warps: int, num_stages: int) -> None:
        self.kernel, self.too_large = kernel, too_large
        self.options = {"num_warps": num_warps, "num_stages": num_stages}

    def __getitem__(self, grid):  # a CompiledKernel checks its resources when it loads
        if self.too_large:
            raise triton.runtime.errors.OutOfResources(1 << 20, 1 << 17, "shared memory")
        return lambda *args: self.kernel[grid](*args, **self.options)


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("shape, dtype, atol, rtol, distribution", sweep_cases(SPEC))
def test_matches_reference_small(shape, dtype, atol, rtol, distribution, causal, device) -> None:
    args = _inputs(shape, dtype, device, distribution, causal=causal)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, args,
                             f"{shape} {dtype} {distribution} causal={causal}")


@pytest.mark.gpu
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES)
@pytest.mark.parametrize("shape", SPEC.sweep + SPEC.edge_shapes, ids=str)
def test_matches_reference_gpu(shape, dtype, atol, rtol, distribution, causal) -> None:
    args = _inputs(shape, dtype, "cuda", distribution, causal=causal)
    _assert_matches_reference_by_heads(KERNEL.kernel_fn, args,
                                       f"{shape} {dtype} {distribution} causal={causal}")


@pytest.fixture(scope="module")
def small_block_kernel(tmp_path_factory: pytest.TempPathFactory):
    return load_starter_with("flash_attention", SMALL_BLOCKS, tmp_path_factory.mktemp("blocks"))


@pytest.mark.parametrize("shape, blocks", [((1, 2, 40, 64), "starter"),
                                           ((2, 1, 64, 128), "starter"),
                                           ((1, 2, 40, 64), "small_blocks"),
                                           ((1, 2, 40, 320), "starter")], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial(case, dtype, shape, blocks, device, small_block_kernel) -> None:
    kernel = KERNEL if blocks == "starter" else small_block_kernel
    assert_adversarial_case_passes(SPEC, kernel.kernel_fn, case, shape, dtype, device,
                                   f"{case.name} {shape} {blocks} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 32, 2048, 128), (8, 16, 512, 64), (2, 16, 3000, 64),
                                   (2, 4, 1000, 512)], ids=str)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_adversarial_gpu(case, dtype, shape) -> None:
    generator = torch.Generator(device="cuda").manual_seed(1)
    args = case.make_inputs(shape, dtype, "cuda", generator)
    _assert_matches_reference_by_heads(KERNEL.kernel_fn, args, f"{case.name} {shape} {dtype}")


def test_rising_logits_overflow_without_a_running_max(device) -> None:
    """The case must be able to fail: exp of the raw logits overflows fp32 to inf/inf = NaN."""
    case = next(c for c in SPEC.adversarial if c.name == "rising_logits")
    q, k, v, causal, scale = case.make_inputs((1, 1, 32, 64), torch.float32, device,
                                              torch.Generator(device=device))
    logits = (q @ k.transpose(-1, -2)) / 8.0
    assert logits.max().item() > 100.0
    mask = torch.ones(32, 32, dtype=torch.bool, device=device).triu(1)
    weights = torch.exp(logits.masked_fill(mask, float("-inf")))  # no max subtracted
    naive = (weights / weights.sum(-1, keepdim=True)) @ v
    with pytest.raises(AssertionError):
        assert_matches_reference(SPEC, lambda *_: naive, (q, k, v, causal, scale), "naive")


def test_causal_mask_and_scale_are_honoured(device) -> None:
    """Causal, full and explicitly scaled attention differ, and each matches its own oracle."""
    args = _inputs((1, 2, 33, 32), torch.float32, device)
    outputs = [
        assert_matches_reference(SPEC, KERNEL.kernel_fn, (*args[:3], causal, scale), label)
        for causal, scale, label in ((True, None, "causal"), (False, None, "full"),
                                     (False, 0.05, "scaled"))
    ]
    assert not torch.allclose(outputs[0], outputs[1])
    assert not torch.allclose(outputs[1], outputs[2])


@pytest.mark.parametrize("head_dim", [64, 320])
def test_non_contiguous_inputs(head_dim, device) -> None:
    q, k, v, causal, scale = _inputs((2, 3, 40, head_dim), torch.float16, device)
    column_major = tuple(t.transpose(-1, -2).contiguous().transpose(-1, -2) for t in (q, k, v))
    assert not column_major[0].is_contiguous()
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (*column_major, causal, scale),
                             "head dim strided")
    wide = torch.cat([q, q], dim=-1)
    assert_matches_reference(SPEC, KERNEL.kernel_fn, (wide[..., ::2], k, v, causal, scale),
                             "every other element of a wider q")


def test_deterministic(device) -> None:
    assert_deterministic(KERNEL.kernel_fn, _inputs((1, 2, 50, 80), torch.bfloat16, device))
    assert_deterministic(KERNEL.kernel_fn,
                         _inputs((2, 1, 37, 64), torch.float32, device, causal=False))
    assert_deterministic(KERNEL.kernel_fn, _inputs((1, 1, 30, 320), torch.float16, device))


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("shape", [(2, 2, 37, 80), (1, 2, 37, 320)], ids=str)
def test_writes_every_output_element(shape, causal, device, tmp_path: Path) -> None:
    module = load_starter_with("flash_attention", SMALL_WIDE_BLOCKS, tmp_path)
    args = _inputs(shape, torch.float32, device, causal=causal)
    with nan_filled_allocations():
        assert_matches_reference(SPEC, module.kernel_fn, args, "over NaN garbage")


@pytest.fixture(scope="module")
def small_wide_block_kernel(tmp_path_factory: pytest.TempPathFactory):
    return load_starter_with("flash_attention", SMALL_WIDE_BLOCKS,
                             tmp_path_factory.mktemp("wide_blocks"))


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("dtype, atol, rtol", DTYPE_TOLERANCES)
@pytest.mark.parametrize("head_dim", [200, 256, 257, 320, 512])
def test_head_dims_around_the_resident_limit(head_dim, dtype, atol, rtol, causal, device,
                                             small_wide_block_kernel) -> None:
    """Up to 256 the head dim is one tile (200 padded to 256); from 257 on it is tiled: 257 leaves
    a one-column QKᵀ slice and a one-column output slice, 320 half-empty ones, 512 none."""
    args = _inputs((1, 2, 37, head_dim), dtype, device, "uniform", causal=causal)
    assert_matches_reference(SPEC, small_wide_block_kernel.kernel_fn, args,
                             f"D={head_dim} {dtype} causal={causal}")


@pytest.mark.parametrize("variant", ["tiled", "tma"])
@pytest.mark.parametrize("head_dim", [64, 320])
def test_allocates_nothing_but_the_output(head_dim, variant, device, monkeypatch,
                                          tma_kernels) -> None:
    """No S x S score matrix and no other scratch: the op must fit wherever its inputs fit twice.
    The one exception is the tma variant's descriptor scratch, which Triton asks the registered
    allocator for at launch on a GPU (128 bytes per descriptor, four per program; the
    interpreter needs none)."""
    module = KERNEL if variant == "tiled" else tma_kernels["tma"]
    args = _inputs((1, 2, 40, head_dim), torch.float16, device)
    module.kernel_fn(*args)  # plan first: only the call itself is measured
    scratch: list[int] = []
    original_scratch = module._descriptor_scratch

    def recording_scratch(size, alignment, stream):
        scratch.append(size)
        return original_scratch(size, alignment, stream)

    monkeypatch.setattr(module, "_descriptor_scratch", recording_scratch)
    allocated: list[int] = []
    for name in ("empty", "empty_like", "empty_strided", "zeros", "zeros_like", "full", "ones"):
        original = getattr(torch, name)

        def recording(*a, _original=original, **kw):
            t = _original(*a, **kw)
            allocated.append(t.numel())
            return t

        monkeypatch.setattr(torch, name, recording)
    out = module.kernel_fn(*args)
    monkeypatch.undo()
    assert allocated == [out.numel(), *scratch]
    launch = _planned(module, *args[:4], device=device)
    assert launch.tma == (variant == "tma" and head_dim <= 256)
    if not launch.tma or device != "cuda":
        assert not scratch
    assert sum(scratch) <= launch.grid[0] * 4 * 128


@pytest.mark.parametrize("head_dim", [64, 320])
def test_64_bit_offsets_within_a_head(head_dim, device, tmp_path: Path, monkeypatch) -> None:
    """A head of 2^31 elements or more takes 64-bit row and column offsets. Forced here at a small
    size (the threshold lowered to 1), on inputs of mixed layouts, so the path runs on the CPU."""
    module = load_starter_with("flash_attention", SMALL_WIDE_BLOCKS, tmp_path)
    monkeypatch.setattr(module, "WIDE_OFFSET", 1)
    q, k, v, _, scale = _inputs((2, 2, 37, head_dim), torch.float32, device)
    column_major_k = k.transpose(-1, -2).contiguous().transpose(-1, -2)
    for causal in (True, False):
        assert_matches_reference(SPEC, module.kernel_fn, (q, column_major_k, v, causal, scale),
                                 f"64-bit offsets causal={causal}")
    launch = module._plan(q.shape, k.shape, v.shape, q.stride(), column_major_k.stride(),
                          v.stride(), (q.dtype,) * 3, True, None, -1)
    assert launch.args[-1] is True  # WIDE_OFFSETS, the kernel's last argument


@pytest.mark.parametrize("tunables", TUNABLE_COMBINATIONS,
                         ids=lambda t: "-".join(map(str, t.values())))
def test_tunable_combination_stays_correct(tunables, device, tmp_path: Path) -> None:
    module = load_starter_with("flash_attention", tunables, tmp_path)
    for i, shape in enumerate(TUNABLE_SHAPES):
        dtype = SPEC.dtypes[i % len(SPEC.dtypes)]
        for causal in (True, False):
            args = _inputs(shape, dtype, device, DISTRIBUTIONS[i], seed=i, causal=causal)
            assert_matches_reference(SPEC, module.kernel_fn, args,
                                     f"{tunables} {shape} {dtype} causal={causal}")


@pytest.mark.gpu
@pytest.mark.parametrize("tunables", covering_sample(starter_space("flash_attention"), count=12,
                                                     seed=1)
                         + [{"BLOCK_M": 128, "BLOCK_N": 128, "NUM_WARPS": 4, "NUM_STAGES": 4}],
                         ids=lambda t: "-".join(map(str, t.values())))
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_tunable_combination_compiles_and_stays_correct_gpu(tunables, dtype, tmp_path) -> None:
    """Compiles for real (shared-memory and register limits): the interpreter checks neither."""
    module = load_starter_with("flash_attention", tunables, tmp_path)
    for shape in ((2, 4, 1000, 128), (1, 8, 777, 80), (1, 4, 777, 512)):
        for causal in (True, False):
            args = _inputs(shape, dtype, "cuda", causal=causal)
            assert_matches_reference(SPEC, module.kernel_fn, args,
                                     f"{tunables} {shape} {dtype} causal={causal}")


def test_tunable_sample_covers_every_value() -> None:
    space = starter_space("flash_attention")
    for name, values in space.items():
        assert {t[name] for t in TUNABLE_COMBINATIONS} == set(values), name


@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_stock_agrees_with_reference(dtype, causal, device) -> None:
    args = _inputs((1, 2, 33, 64), dtype, device, "uniform", causal=causal)
    assert_matches_reference(SPEC, SPEC.stock, args, f"stock {dtype} causal={causal}")


def test_flop_convention() -> None:
    shape = (2, 4, 128, 64)
    assert SPEC.flops(shape) == 2 * 2 * 4 * 128 * 128 * 64  # causal: the unmasked half
    assert SPEC.flops(shape, causal=False) == 2 * SPEC.flops(shape)
    assert SPEC.bytes(shape, torch.float16) == 4 * 2 * 4 * 128 * 64 * 2


def test_make_inputs_passes_causal_and_scale_positionally(device) -> None:
    *_, causal, scale = _inputs((1, 1, 8, 32), torch.float16, device)
    assert (causal, scale) == (True, None)
    *_, causal, scale = _inputs((1, 1, 8, 32), torch.float16, device, causal=False, scale=0.5)
    assert (causal, scale) == (False, 0.5)
    with pytest.raises(ValueError):
        SPEC.make_inputs((1, 1, 8, 32), torch.float16, device, torch.Generator(device=device),
                         window=4)


def test_head_group_check_sees_every_head(device) -> None:
    """The GPU sweep's grouped comparison must fail when any one head is wrong."""
    args = _inputs((1, 5, 16, 32), torch.float32, device)

    def one_head_wrong(*a):
        out = KERNEL.kernel_fn(*a)
        out[:, 4] += 1.0
        return out

    two_heads = 2 * 16 * 16 * 8
    _assert_matches_reference_by_heads(KERNEL.kernel_fn, args, "grouped", two_heads)
    with pytest.raises(AssertionError):
        _assert_matches_reference_by_heads(one_head_wrong, args, "grouped", two_heads)


@pytest.mark.parametrize("head_dim", [64, 320])
def test_shrinks_until_the_launch_fits(head_dim, device, tmp_path: Path, monkeypatch) -> None:
    """Out of shared memory: fewer stages, then a smaller BLOCK_N, until the compiled kernel fits
    (both head-dim paths); the plan that fits is kept, so the next call compiles nothing."""
    module = load_starter_with("flash_attention", {"BLOCK_N": 64, "NUM_STAGES": 4}, tmp_path)
    picky = _RefusesLargeLaunches(module.flash_attention_kernel, max_block=16)
    monkeypatch.setattr(module, "flash_attention_kernel", picky)
    shape = (1, 2, 60, head_dim)
    assert_matches_reference(SPEC, module.kernel_fn, _inputs(shape, torch.float32, device),
                             "after shrinking")
    assert picky.compiles[-1] == (16, 1)
    assert picky.compiles == sorted(picky.compiles, reverse=True)  # only ever shrinks
    compiled = len(picky.compiles)
    assert_matches_reference(SPEC, module.kernel_fn, _inputs(shape, torch.float32, device, seed=1),
                             "planned")
    assert len(picky.compiles) == compiled


def test_rejects_mismatched_inputs(device) -> None:
    q, k, v, *_ = _inputs((1, 2, 8, 32), torch.float16, device)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(q, k[:, :1], v)
    with pytest.raises(ValueError):
        KERNEL.kernel_fn(q, k.float(), v)


# ---------------------------------------------------------------------------------------------
# VARIANT = "tma": per-head TMA descriptors, where TMA can address the inputs.


@pytest.fixture(scope="module")
def tma_kernels(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("tma")
    return {name: load_starter_with("flash_attention", tunables, directory)
            for name, tunables in TMA_SETTINGS.items()}


def _planned(module, q, k, v, causal=True, scale=None, device: str = "cpu"):
    """The launch module's kernel_fn plans for these tensors."""
    return module._plan(q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(),
                        (q.dtype, k.dtype, v.dtype), causal, scale,
                        torch.cuda.current_device() if device == "cuda" else -1,
                        all(t.data_ptr() % 16 == 0 for t in (q, k, v)))


@pytest.mark.parametrize("setting", list(TMA_SETTINGS))
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("dtype, atol, rtol", TMA_DTYPE_TOLERANCES)
@pytest.mark.parametrize("shape", TMA_SHAPES, ids=str)
def test_tma_variant_matches_reference(shape, dtype, atol, rtol, causal, setting, device,
                                       tma_kernels) -> None:
    """The tma kernel itself (the interpreter runs tensor descriptors, zero fill and clipped
    stores included), bf16 through the UPCAST path like the tiled kernel."""
    module = tma_kernels[setting]
    args = _inputs(shape, dtype, device, "normal", causal=causal)
    assert _planned(module, *args[:4], device=device).tma
    assert_matches_reference(SPEC, module.kernel_fn, args,
                             f"{setting} {shape} {dtype} causal={causal}")


@pytest.mark.parametrize("setting", list(TMA_SETTINGS))
@pytest.mark.parametrize("case", SPEC.adversarial, ids=lambda c: c.name)
def test_tma_variant_adversarial(case, setting, device, tma_kernels) -> None:
    """rising_logits, ragged ends, one query, D = 80, explicit scale, [B, S, H, D] views (row
    stride H·D: TMA addresses them)."""
    for dtype in (torch.float16, torch.bfloat16):
        assert_adversarial_case_passes(SPEC, tma_kernels[setting].kernel_fn, case,
                                       (1, 2, 40, 64), dtype, device,
                                       f"{case.name} {setting} {dtype}")


def test_tma_variant_writes_every_output_element_and_is_deterministic(device,
                                                                      tma_kernels) -> None:
    for setting, module in tma_kernels.items():
        for causal in (True, False):
            args = _inputs((2, 2, 37, 80), torch.float16, device, causal=causal)
            with nan_filled_allocations():
                assert_matches_reference(SPEC, module.kernel_fn, args,
                                         f"{setting} over NaN garbage causal={causal}")
        assert_deterministic(module.kernel_fn, _inputs((1, 2, 50, 64), torch.bfloat16, device))


def test_tma_variant_falls_back_to_tiled_where_tma_cannot_run(device, tma_kernels,
                                                              monkeypatch) -> None:
    """The plan takes the tiled kernel for what TMA cannot address or the variant does not
    serve, and stays correct there."""
    module = tma_kernels["tma"]
    q, k, v, causal, scale = _inputs((2, 3, 40, 64), torch.float16, device)
    assert _planned(module, q, k, v, device=device).tma  # contiguous fp16: TMA (on CPU too)
    bshd = _inputs((2, 40, 3, 64), torch.float16, device)
    assert _planned(module, *(t.transpose(1, 2) for t in bshd[:3]), device=device).tma
    column_major = tuple(t.transpose(-1, -2).contiguous().transpose(-1, -2) for t in (q, k, v))
    odd_rows = _inputs((1, 2, 40, 100), torch.float16, device)  # 200-byte rows
    wide_q = torch.cat([q, q], dim=-1)[..., ::2]  # head dim strided
    offset_q = torch.empty(q.numel() + 1, dtype=q.dtype, device=q.device)[1:].view(q.shape)
    offset_q.copy_(q)  # 2 bytes off a 16-byte boundary
    fallbacks = {
        "column-major": (*column_major, causal, scale),
        "strided head dim": (wide_q, k, v, causal, scale),
        "fp32": _inputs((1, 2, 40, 64), torch.float32, device),
        "D=512": _inputs((1, 2, 40, 512), torch.float16, device),
        "D=100 rows not 16-byte aligned": odd_rows,
        "negative scale": (q, k, v, causal, -0.1),
        "base off 16 bytes": (offset_q, k, v, causal, scale),
    }
    for label, args in fallbacks.items():
        assert not _planned(module, *args[:5], device=device).tma, label
        assert_matches_reference(SPEC, module.kernel_fn, args, f"fallback: {label}")
    # A GPU without TMA (before sm_90): what _tma_strides decides for it.
    monkeypatch.setattr(module, "_has_tma", lambda device: False)
    strides = (q.stride(), k.stride(), v.stride(), q.stride())
    assert module._tma_strides(q.shape, strides, q.dtype, None, 0, True) is None
    monkeypatch.undo()
    assert module._tma_strides(q.shape, strides, q.dtype, None, -1, True) is not None
    tiled = KERNEL._tma_strides(q.shape, strides, q.dtype, None, -1, True)
    assert tiled is None  # the default VARIANT


def test_tma_strides_take_placeholders_for_single_dims() -> None:
    """A dim of size 1 is only indexed at 0: TMA gets an aligned placeholder stride for it."""
    module = KERNEL
    original = module.VARIANT
    module.VARIANT = "tma"
    try:
        shape = (1, 2, 1, 40)
        odd = (7, 40, 3, 1)  # batch and row strides that no 16-byte rule allows
        found = module._tma_strides(shape, (odd,) * 4, torch.float16, None, -1, True)
    finally:
        module.VARIANT = original
    assert found == (40, 40, 40) * 4


@pytest.mark.gpu
@pytest.mark.parametrize("setting", [{"VARIANT": "tma"}, {"VARIANT": "tma", "BLOCK_N": 128},
                                     {"VARIANT": "tma", "NUM_WARPS": 4}], ids=lambda t: "-".join(
                                          map(str, t.values())))
@pytest.mark.parametrize("causal", CAUSAL)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dtype_name)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("seq_len", [1024, 3000, 8192])
def test_tma_variant_gpu(seq_len, head_dim, dtype, causal, setting, tmp_path) -> None:
    """The tma kernel compiled for real on sm_90+, S 1024-8192 (3000: ragged), resident heads."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("TMA needs sm_90 or newer")
    module = load_starter_with("flash_attention", setting, tmp_path)
    args = _inputs((1, 4, seq_len, head_dim), dtype, "cuda", causal=causal)
    assert _planned(module, *args[:4], device="cuda").tma
    _assert_matches_reference_by_heads(module.kernel_fn, args,
                                       f"{setting} S={seq_len} D={head_dim} {dtype} "
                                       f"causal={causal}")


# A module whose `gpu_launch` plans and launches what the starter would on CUDA device 0 of an
# H100 (tensor-core dots, Hopper's shared memory), for CPU tensors: the interpreter's own variant
# upcasts every tile, so checking the public kernel_fn would compile the wrong kernel. It loads a
# private copy of the starter, so patching that copy leaves the imported module alone.
GPU_LAUNCH_MODULE = textwrap.dedent('''
    import importlib.util
    import sys

    import torch

    from autokernel.aot import HOPPER_MAX_SHARED_BYTES

    _spec = importlib.util.spec_from_file_location({name!r}, {path!r})
    starter = importlib.util.module_from_spec(_spec)
    sys.modules[{name!r}] = starter  # Triton reads the kernels' source through it
    _spec.loader.exec_module(starter)
    starter._shared_memory_bytes = lambda device: HOPPER_MAX_SHARED_BYTES
    starter._has_tma = lambda device: True  # device 0 is an H100
    starter.WIDE_OFFSET = {wide_offset}
    for _name, _value in {tunables!r}.items():
        setattr(starter, _name, _value)
    flash_attention_kernel = starter.flash_attention_kernel  # what the compile phase looks up
    flash_attention_tma_kernel = starter.flash_attention_tma_kernel


    def gpu_launch(q, k, v, causal, scale):
        launch = starter._plan(q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(),
                               (q.dtype, k.dtype, v.dtype), causal, scale, 0)
        out = torch.empty(q.shape, dtype=q.dtype)
        starter._launch(launch, q, k, v, out)
        return out
''')

# (shape, dtype, causal): the resident path at its common and widest head dims, the tiled path at
# a ragged S, at one and two output slices, and in fp32 (ieee dots, the largest tiles).
# D = 128 at the bench shape is also compiled by tests/test_aot.py, and the resident heads 64-256
# by the tma variant's check below: these are the tiled kernel's paths (resident 256, head-dim
# tiling ragged at 320 and wide at 1024, fp32 at 768).
HOPPER_CALLS = (
    ((1, 4, 2048, 256), torch.bfloat16, True),
    ((2, 4, 1000, 320), torch.float16, True),
    ((1, 2, 2048, 1024), torch.float16, True),
    ((1, 2, 1024, 768), torch.float32, True),
)


def _gpu_launch_module(directory: Path, wide_offset: int, tunables: dict | None = None,
                       tag: str = "") -> Path:
    path = directory / f"flash_attention_gpu_launch_{wide_offset}{tag}.py"
    path.write_text(GPU_LAUNCH_MODULE.format(name=f"flash_attention_gpu_copy_{wide_offset}{tag}",
                                             path=str(starter_path("flash_attention")),
                                             wide_offset=wide_offset, tunables=tunables or {}))
    return path


def _hopper_calls(selected) -> list:
    return [(f"{'x'.join(map(str, shape))} {dtype_name(dtype)} causal={causal}",
             (torch.empty(shape, dtype=dtype), torch.empty(shape, dtype=dtype),
              torch.empty(shape, dtype=dtype), causal, None))
            for shape, dtype, causal in selected]


@pytest.mark.skipif(not triton_interprets(), reason="launches are recorded under the interpreter")
def test_gpu_launches_compile_for_hopper_without_spills(tmp_path: Path) -> None:
    """The starter's GPU launches (not the interpreter's upcast variant) at realistic shapes, head
    dims 128 to 1024, build for sm_90a within Hopper's limits and without register spills; one
    also with 64-bit offsets. Checked without a GPU, through Triton's compiler (autokernel.aot)."""
    calls = _hopper_calls
    results = check_file(_gpu_launch_module(tmp_path, 2**31), "gpu_launch", calls(HOPPER_CALLS),
                         execute=False)
    results += check_file(_gpu_launch_module(tmp_path, 1), "gpu_launch",
                          calls(HOPPER_CALLS[1:2]), execute=False)
    problems = [format_result(r) for r in results if not r.ok or r.local_bytes != 0]
    assert not problems, "\n".join(problems)
    assert len(results) == len(HOPPER_CALLS) + 1
    for r in results:
        assert r.constexprs["UPCAST"] is False, r.context  # the tensor-core variant
        head_dim, block_dk = r.constexprs["HEAD_DIM"], r.constexprs["BLOCK_DK"]
        assert (block_dk < head_dim) == (head_dim > 256), r.context  # tiled past 256
    assert sum(r.constexprs["WIDE_OFFSETS"] for r in results) == 1


# The tma variant's launches: resident head dims in both tensor-core dtypes and both causal modes
# at the default tunables (8 warps); BLOCK_N 128 and 4 warps at four of those calls each, every
# head dim among them (20 compiles in all, about 40 s on two cores without Triton's cache).
TMA_HOPPER_CALLS = tuple(((1, 8, 2048, head_dim), dtype, causal)
                         for head_dim in (64, 128, 256)
                         for dtype in (torch.float16, torch.bfloat16) for causal in (True, False))
TMA_HOPPER_SETTINGS = (
    ({"VARIANT": "tma"}, TMA_HOPPER_CALLS),
    ({"VARIANT": "tma", "BLOCK_N": 128}, TMA_HOPPER_CALLS[::3]),
    ({"VARIANT": "tma", "NUM_WARPS": 4}, TMA_HOPPER_CALLS[1::3]),
)


@pytest.mark.skipif(not triton_interprets(), reason="launches are recorded under the interpreter")
def test_tma_launches_compile_for_hopper_without_spills(tmp_path: Path) -> None:
    """The tma kernel as the plan launches it on an H100 builds for sm_90a within Hopper's shared
    memory and registers, without spills, in every setting above."""
    results = []
    for i, (tunables, selected) in enumerate(TMA_HOPPER_SETTINGS):
        results += check_file(_gpu_launch_module(tmp_path, 2**31, tunables, f"_tma{i}"),
                              "gpu_launch", _hopper_calls(selected), execute=False)
    problems = [format_result(r) for r in results if not r.ok or r.local_bytes != 0]
    assert not problems, "\n".join(problems)
    assert len(results) == sum(len(selected) for _, selected in TMA_HOPPER_SETTINGS)
    for r in results:
        assert r.kernel == "flash_attention_tma_kernel", r.context
        assert r.constexprs["UPCAST"] is False, r.context
        assert r.shared_bytes <= HOPPER_MAX_SHARED_BYTES, r.context
    assert {r.constexprs["HEAD_DIM"] for r in results} == {64, 128, 256}
