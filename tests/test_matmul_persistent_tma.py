"""The matmul starter's VARIANT = "persistent_tma": the persistent kernel with device-side TMA
descriptors against the reference (Triton 3.6's interpreter runs descriptors, so on CPU too),
its per-call fallback to the tiled kernel, and a Hopper compile of it without a GPU."""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType

import pytest
import torch
from starter_checks import (
    assert_matches_reference,
    dtype_tolerance_params,
    load_starter_with,
    seeded_inputs,
    starter_path,
)

from autokernel.ops import get_spec
from autokernel.ops.spec import dtype_name

SPEC = get_spec("matmul")
PERSISTENT = {"VARIANT": "persistent_tma"}
# Small blocks on CPU: several row, column and K tiles, and each of the interpreter's few
# programs walks several of them.
SMALL_BLOCKS = {**PERSISTENT, "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32}
# M = 1; N a multiple of 8 but not 16 (rows still 16-byte aligned in fp16); N odd (C's rows
# unaligned: the masked store, or the tiled kernel when B is row-major); K odd (tiled kernel).
ODD_SHAPES = ((1, 1, 4096, 4096), (1, 512, 1000, 512), (1, 300, 1001, 512), (1, 300, 520, 1001),
              (1, 257, 33, 96), (6, 100, 72, 40))

_inputs = functools.partial(seeded_inputs, SPEC)


class _LaunchCounter:
    """Stands in for a @triton.jit kernel and counts its launches."""

    def __init__(self, kernel) -> None:
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


def _count_launches(module: ModuleType, monkeypatch: pytest.MonkeyPatch
                    ) -> tuple[_LaunchCounter, _LaunchCounter]:
    persistent = _LaunchCounter(module.matmul_persistent_tma_kernel)
    tiled = _LaunchCounter(module.matmul_kernel)
    monkeypatch.setattr(module, "matmul_persistent_tma_kernel", persistent)
    monkeypatch.setattr(module, "matmul_kernel", tiled)
    return persistent, tiled


def _plan(module: ModuleType, a: torch.Tensor, b: torch.Tensor):
    return module._plan(a.shape, a.stride(), b.shape, b.stride(), a.dtype, a.device)


@pytest.fixture(scope="module")
def small_block_kernel(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_starter_with("matmul", SMALL_BLOCKS, tmp_path_factory.mktemp("tma"))


def _operands(layout: str, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(4)

    def r(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator, device=device) / 5).to(dtype)

    return {
        "plain": lambda: (r(40, 64), r(64, 48)),
        "weight_t": lambda: (r(40, 64), r(48, 64).t()),
        "bmm": lambda: (r(3, 21, 72), r(3, 72, 40)),
        "broadcast_batch": lambda: (r(4, 1, 7, 24), r(3, 24, 8)),
        "x_at_weight_t": lambda: (r(2, 5, 7, 32), r(24, 32).t()),
        "ragged_n_weight_t": lambda: (r(40, 64), r(33, 64).t()),
        "one_column": lambda: (r(19, 64), r(64, 1)),
    }[layout]()


@pytest.mark.parametrize("layout, b_transposed, store_descriptor", [
    ("plain", False, True), ("weight_t", True, True), ("bmm", False, True),
    ("broadcast_batch", False, True), ("x_at_weight_t", True, True),
    ("ragged_n_weight_t", True, False), ("one_column", True, False)])
def test_persistent_kernel_matches_reference(layout, b_transposed, store_descriptor, device,
                                             small_block_kernel, monkeypatch) -> None:
    """Every layout TMA can address runs the persistent kernel, and only it."""
    a, b = _operands(layout, torch.float32, device)
    tma = _plan(small_block_kernel, a, b).tma
    assert tma is not None and (tma.b_transposed, tma.store_descriptor) == (b_transposed,
                                                                            store_descriptor)
    persistent, tiled = _count_launches(small_block_kernel, monkeypatch)
    out = assert_matches_reference(SPEC, small_block_kernel.kernel_fn, (a, b), layout)
    assert out.shape == torch.matmul(a, b).shape
    assert (persistent.launches, tiled.launches) == (1, 0)


def test_attention_views_run_the_persistent_kernel(device, small_block_kernel,
                                                   monkeypatch) -> None:
    """q @ kᵀ on views cut out of a fused projection: two batch levels no stride merges, B
    transposed; 4-D descriptors read them in place."""
    case = next(c for c in SPEC.adversarial if c.name == "views_of_fused_projections")
    a, b = case.make_inputs((4, 20, 24, 32), torch.float32, device,
                            torch.Generator(device=device).manual_seed(0))
    plan = _plan(small_block_kernel, a, b)
    assert (plan.outer, plan.inner) == (2, 2) and plan.tma.b_transposed
    persistent, tiled = _count_launches(small_block_kernel, monkeypatch)
    assert_matches_reference(SPEC, small_block_kernel.kernel_fn, (a, b), "qkv views")
    assert (persistent.launches, tiled.launches) == (1, 0)


def _column_major(a: torch.Tensor) -> torch.Tensor:
    return a.t().contiguous().t()


@pytest.mark.parametrize("case", ["k_odd", "column_major_a", "unaligned_base", "split_k"])
def test_falls_back_to_the_tiled_kernel(case, device, small_block_kernel, tmp_path: Path,
                                        monkeypatch) -> None:
    """What TMA cannot address runs the tiled kernel for that call, still correct."""
    module = small_block_kernel
    a, b = _operands("plain", torch.float32, device)
    if case == "k_odd":  # rows of A 63 x 4 bytes apart: not a multiple of 16
        a, b = a[:, :63].contiguous(), b[:63].contiguous()
    elif case == "column_major_a":
        a = _column_major(a)
    elif case == "unaligned_base":  # strides fine, base address 4 bytes past a 16-byte boundary
        a = torch.cat([a, a], dim=1)[:, 1:65]
        assert _plan(module, a, b).tma is not None
    else:
        module = load_starter_with("matmul", {**SMALL_BLOCKS, "SPLIT_K": 2}, tmp_path)
    persistent, tiled = _count_launches(module, monkeypatch)
    assert_matches_reference(SPEC, module.kernel_fn, (a, b), case)
    assert (persistent.launches, tiled.launches) == (0, 1)


def test_warp_specialisation_only_where_triton_compiles_it(tmp_path: Path) -> None:
    """Triton 3.6 cannot compile a warp-specialised loop over fp32, 4-D descriptors or 64 x 256
    tiles."""
    module = load_starter_with("matmul", {**PERSISTENT, "WARP_SPECIALIZE": True}, tmp_path)

    def operands(m: int, n: int, batch: tuple[int, ...] = (), dtype=torch.float16):
        return torch.empty(*batch, m, 64, dtype=dtype), torch.empty(*batch, 64, n, dtype=dtype)

    assert _plan(module, *operands(256, 256)).tma.warp_specialize
    assert not _plan(module, *operands(256, 256, (2,))).tma.warp_specialize
    assert not _plan(module, *operands(256, 256, dtype=torch.float32)).tma.warp_specialize
    wide = load_starter_with("matmul", {**PERSISTENT, "WARP_SPECIALIZE": True, "BLOCK_M": 64,
                                        "BLOCK_N": 256}, tmp_path)
    assert not _plan(wide, *operands(256, 256)).tma.warp_specialize


def test_descriptor_view(small_block_kernel) -> None:
    view = small_block_kernel._descriptor_view
    assert view((1, 3, 40, 64), (0, 2560, 64, 1), 2) == ((1, 3, 40, 64), (64, 2560, 64))
    assert view((2, 3, 40, 64), (0, 2560, 64, 1), 4) == ((1, 3, 40, 64), (64, 2560, 64))
    assert view((1, 1, 40, 63), (0, 0, 63, 1), 4) is None  # 252-byte rows
    assert view((1, 1, 40, 64), (0, 0, 1, 40), 4) is None  # column-major
    assert view((1, 1, 64, 1), (0, 0, 1, 1), 2) is None  # a column: rows 2 bytes apart
    assert view((1, 1, 1, 64), (0, 0, 1, 1), 2) == ((1, 1, 1, 64), (64, 64, 64))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checked by the GPU tests")
def test_persistent_kernel_compiles_for_hopper(tmp_path: Path) -> None:
    """fp16 and bf16 at the default tiles (2-D with Wᵀ, batched), and warp-specialised, build for
    sm_90 within its shared-memory and register limits and without spills. Launches are
    recorded on CPU tensors with the plan a GPU would make (no upcast)."""
    from autokernel.aot import compile_requests, format_result, gpu_target, record_launches
    from autokernel.aot import specialize

    requests = []
    calls = [(PERSISTENT, (1, 512, 512, 512), torch.float16, True),
             (PERSISTENT, (4, 256, 256, 128), torch.bfloat16, False),
             ({**PERSISTENT, "WARP_SPECIALIZE": True, "NUM_WARPS": 4}, (1, 512, 512, 512),
              torch.bfloat16, False)]
    for tunables, shape, dtype, b_transposed in calls:
        module = load_starter_with("matmul", tunables, tmp_path)
        a, b = _inputs(shape, dtype, "cpu", b_transposed=b_transposed)
        plan = _plan(module, a, b)._replace(upcast=False, precision="tf32")
        c = torch.empty(plan.out_shape, dtype=dtype)
        with record_launches(execute=False) as launches:
            module._launch_persistent_tma(plan, a, b, c, plan.block_k, plan.num_stages)
        context = f"{tunables} {shape} {dtype_name(dtype)}"
        requests += [specialize(launch, gpu_target(), context) for launch in launches]
    assert [r.kernel for r in requests] == ["matmul_persistent_tma_kernel"] * len(calls)
    results = compile_requests(starter_path("matmul"), requests)
    assert len(results) == len(calls)
    for result in results:
        assert result.ok and not result.local_bytes, format_result(result)
    assert [r.constexprs["WARP_SPECIALIZE"] for r in results] == [False, False, True]


# ---------------------------------------------------------------------------------------------
# GPU only: the variant at the registry's shapes and odd ones (run later, on an H100/H200)


@functools.cache
def _gpu_kernel(tunables: tuple[tuple[str, object], ...], directory: Path) -> ModuleType:
    return load_starter_with("matmul", dict(tunables), directory)


def _expects_tma(module: ModuleType, a: torch.Tensor, b: torch.Tensor) -> bool:
    return (_plan(module, a, b).tma is not None and a.data_ptr() % 16 == 0
            and b.data_ptr() % 16 == 0)


@pytest.mark.gpu
@pytest.mark.parametrize("b_transposed", [False, True], ids=["b_row_major", "b_transposed"])
@pytest.mark.parametrize("dtype, atol, rtol", dtype_tolerance_params(SPEC))
@pytest.mark.parametrize("shape", SPEC.sweep + SPEC.edge_shapes + ODD_SHAPES, ids=str)
def test_persistent_kernel_matches_reference_gpu(shape, dtype, atol, rtol, b_transposed,
                                                 tmp_path_factory, monkeypatch) -> None:
    module = _gpu_kernel(tuple(PERSISTENT.items()), tmp_path_factory.getbasetemp())
    args = _inputs(shape, dtype, "cuda", b_transposed=b_transposed)
    persistent, tiled = _count_launches(module, monkeypatch)
    assert_matches_reference(SPEC, module.kernel_fn, args, f"{shape} {dtype} {b_transposed}")
    assert persistent.launches == int(_expects_tma(module, *args))


@pytest.mark.gpu
@pytest.mark.parametrize("tunables", [
    {**PERSISTENT, "WARP_SPECIALIZE": True, "NUM_WARPS": 4},
    {**PERSISTENT, "BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_STAGES": 4},
    {**PERSISTENT, "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "GROUP_M": 1},
    {**PERSISTENT, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "NUM_STAGES": 5,
     "FP32_PRECISION": "tf32x3"}], ids=lambda t: "-".join(map(str, t.values())))
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=dtype_name)
def test_persistent_tunables_compile_and_stay_correct_gpu(tunables, dtype,
                                                          tmp_path_factory) -> None:
    """Compiles for real (shared memory, warp specialisation): the interpreter checks neither."""
    module = _gpu_kernel(tuple(tunables.items()), tmp_path_factory.getbasetemp())
    for shape in ((1, 4096, 4096, 4096), (1, 1000, 1104, 1296), (1, 16, 4096, 4096),
                  (96, 256, 248, 96)):
        for b_transposed in (False, True):
            args = _inputs(shape, dtype, "cuda", b_transposed=b_transposed)
            assert_matches_reference(SPEC, module.kernel_fn, args,
                                     f"{tunables} {shape} {dtype} {b_transposed}")
