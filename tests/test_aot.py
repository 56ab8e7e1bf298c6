"""The ahead-of-time Hopper compile check, on this CPU-only machine.

Each test kernel below runs fine in the Triton interpreter; the check must still find what an H100
would reject: code the compiler refuses, too much shared memory, a grid axis over 65535, a launch
option the JIT does not know.
"""

from __future__ import annotations

from typing import Any

import textwrap
from pathlib import Path

import pytest
import torch

from autokernel.aot import (
    HOPPER_MAX_SHARED_BYTES,
    AotResult,
    check_file,
    check_kernel_file,
    record_launches,
    triton_interprets,
)
from autokernel.kernels import starter_path
from autokernel.ops import KERNEL_TYPES, get_spec

KERNELS = textwrap.dedent('''
    import math

    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _twice(x):
        return x * 2.0


    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
        tl.store(out_ptr + offsets, (_twice(x) * alpha).to(out_ptr.dtype.element_ty), mask=mask)


    def scale(x, alpha=0.5, block=128, num_warps=4, **launch):
        out = torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), block),)
        scale_kernel[grid](x, out, x.numel(), alpha, BLOCK=block, num_warps=num_warps, **launch)
        return out


    def scale_twice(x):
        return scale(scale(x))


    def scale_with_typo(x):
        return scale(x, num_warp=8)


    @triton.jit
    def rsqrt_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        mask = offsets < n
        # Fine in the interpreter (n is a numpy scalar there), a TypeError for the compiler.
        scale = 1.0 / math.sqrt(n)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * scale, mask=mask)


    def rsqrt_scale(x):
        out = torch.empty_like(x)
        rsqrt_scale_kernel[(1,)](x, out, x.numel(), BLOCK=128)
        return out


    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.arange(0, BM)
        rn = tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a_mask = (rm[:, None] < M) & ((k + rk)[None, :] < K)
            b_mask = ((k + rk)[:, None] < K) & (rn[None, :] < N)
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=a_mask, other=0.0)
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=b_mask, other=0.0)
            acc += tl.dot(a, b)
        c_mask = (rm[:, None] < M) & (rn[None, :] < N)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=c_mask)


    def dot(a, b, block_m, block_k, num_stages):
        c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
        dot_kernel[(1,)](a, b, c, a.shape[0], b.shape[1], a.shape[1], BM=block_m, BN=block_m,
                         BK=block_k, num_stages=num_stages, num_warps=4)
        return c


    @triton.jit
    def fill_row_kernel(x_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(1)
        cols = tl.arange(0, BLOCK)
        tl.store(x_ptr + row * n_cols + cols, 1.0, mask=cols < n_cols)


    def fill_rows_on_axis1(x):
        fill_row_kernel[(1, x.shape[0])](x, x.shape[1], BLOCK=16)
        return x


    def no_kernel(x):
        return x * 2


    def raises(x):
        raise ValueError("bad launcher")
''')


@pytest.fixture(scope="module")
def kernels_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("aot") / "toy_kernels.py"
    path.write_text(KERNELS)
    return path


def _only(results: list[AotResult]) -> AotResult:
    assert len(results) == 1, results
    return results[0]


def test_a_good_kernel_compiles_for_hopper(kernels_file: Path) -> None:
    x = torch.randn(1000, dtype=torch.float16)
    r = _only(check_file(kernels_file, "scale", [("fp16 1000", (x,))]))
    assert r.ok, r.error
    assert r.kernel == "scale_kernel" and r.context == "fp16 1000"
    assert r.signature == {"x_ptr": "*fp16", "out_ptr": "*fp16", "n": "i32", "alpha": "fp32",
                           "BLOCK": "constexpr"}
    assert r.constexprs == {"BLOCK": 128}
    assert (r.num_warps, r.grid) == (4, [8, 1, 1])
    assert r.shared_bytes is not None and r.shared_bytes <= HOPPER_MAX_SHARED_BYTES
    assert r.n_regs is not None and 0 < r.n_regs <= 255  # from the bundled cuobjdump
    assert r.local_bytes == 0 and not r.warnings


def test_signature_follows_dtypes_and_identical_launches_compile_once(kernels_file: Path) -> None:
    calls = [
        ("bf16", (torch.randn(300, dtype=torch.bfloat16),)),
        ("fp32", (torch.randn(300),)),
        ("fp32 again", (torch.randn(300),)),  # same specialisation: checked once
    ]
    results = check_file(kernels_file, "scale", calls)
    assert [r.signature["x_ptr"] for r in results] == ["*bf16", "*fp32"]
    assert all(r.ok for r in results)
    # Two launches inside one call, identical: one result.
    assert _only(check_file(kernels_file, "scale_twice", [("twice", (torch.randn(64),))])).ok


def test_launch_options_reach_the_compiler(kernels_file: Path) -> None:
    x = torch.randn(4096)
    r = _only(check_file(kernels_file, "scale", [("big", (x, 0.5, 1024, 8))]))
    assert r.ok and r.num_warps == 8 and r.constexprs == {"BLOCK": 1024} and r.grid == [4, 1, 1]


def test_code_the_compiler_rejects_is_found(kernels_file: Path) -> None:
    x = torch.randn(70)
    r = _only(check_file(kernels_file, "rsqrt_scale", [("x", (x,))]))
    assert not r.ok and "CompilationError" in r.error and "sqrt" in r.error


@pytest.mark.skipif(not triton_interprets(), reason="needs the interpreter in this process")
def test_that_kernel_really_runs_in_the_interpreter(kernels_file: Path) -> None:
    from autokernel.aot import load_module

    x = torch.randn(70)
    out = load_module(kernels_file).rsqrt_scale(x)
    torch.testing.assert_close(out, x / 70**0.5)


def test_too_much_shared_memory_is_found(kernels_file: Path) -> None:
    a, b = torch.randn(40, 200), torch.randn(200, 30)
    # fp32 128x64 tiles of A and B, four stages deep: 256 KiB of shared memory, over 227 KiB.
    r = _only(check_file(kernels_file, "dot", [("fp32 128x128x64 x4", (a, b, 128, 64, 4))],
                         execute=False))
    assert not r.ok and r.shared_bytes > HOPPER_MAX_SHARED_BYTES
    assert "shared memory" in r.error


def test_a_grid_axis_over_65535_is_found(kernels_file: Path) -> None:
    x = torch.zeros(70000, 5)
    r = _only(check_file(kernels_file, "fill_rows_on_axis1", [("70000 rows", (x,))],
                         execute=False))
    assert not r.ok and r.grid == [1, 70000, 1] and "grid axis 1" in r.error


def test_an_unknown_launch_option_is_found(kernels_file: Path) -> None:
    # The interpreter silently drops keyword arguments it does not know; the GPU JIT raises.
    r = _only(check_file(kernels_file, "scale_with_typo", [("typo", (torch.randn(64),))]))
    assert not r.ok and "num_warp" in r.error


def test_launchers_that_launch_nothing_or_raise_fail(kernels_file: Path) -> None:
    r = _only(check_file(kernels_file, "no_kernel", [("x", (torch.randn(8),))]))
    assert not r.ok and "launched no Triton kernel" in r.error
    r = _only(check_file(kernels_file, "raises", [("x", (torch.randn(8),))]))
    assert not r.ok and "bad launcher" in r.error


@pytest.mark.skipif(not triton_interprets(), reason="the compile phase must run in a child")
def test_a_dead_compile_child_is_a_failed_result(kernels_file: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import autokernel.aot as aot

    requests, failures = aot.record_call(aot.load_module(kernels_file).scale,
                                         (torch.randn(64),), execute=False)
    assert requests and not failures
    monkeypatch.setattr(aot, "SUBPROCESS_TIMEOUT_S", 0.01)
    r = _only(aot.compile_requests(kernels_file, requests))
    assert not r.ok and r.kernel == "scale_kernel" and "timed out" in r.error


@pytest.mark.skipif(not triton_interprets(), reason="needs the interpreter in this process")
def test_record_launches_executes_only_when_asked(kernels_file: Path) -> None:
    from autokernel.aot import load_module

    module = load_module(kernels_file)
    x = torch.randn(300)
    with record_launches(execute=True) as launches:
        out = module.scale(x)
    torch.testing.assert_close(out, x)  # 2 * 0.5
    assert [launch.name for launch in launches] == ["scale_kernel"]
    assert launches[0].kwargs == {"BLOCK": 128, "num_warps": 4}
    assert launches[0].args[2:] == (300, 0.5) and launches[0].grid == (3,)

    sentinel = torch.full((300,), 7.0)
    with record_launches(execute=False) as launches:
        module.scale_kernel[(3,)](x, sentinel, 300, 0.5, BLOCK=128)
    assert len(launches) == 1 and torch.all(sentinel == 7.0)


# Starters whose own test file compiles their GPU launches for sm_90a already, with stricter
# checks (no spills, Hopper's shared memory) at more shapes: not compiled twice in CI.
COMPILED_BY_THEIR_OWN_TESTS = {
    "flash_attention": "tests/test_flash_attention.py::test_gpu_launches_compile_for_hopper_"
                       "without_spills and test_tma_launches_compile_for_hopper_without_spills",
}


def _starter_types() -> list[Any]:
    return [pytest.param(t, marks=pytest.mark.skip(reason=f"compiled by {why}"))
            if (why := COMPILED_BY_THEIR_OWN_TESTS.get(t)) else t for t in KERNEL_TYPES]


@pytest.mark.parametrize("kernel_type", _starter_types())
def test_starters_compile_for_hopper(kernel_type: str) -> None:
    path = starter_path(kernel_type)
    if not path.exists():
        pytest.skip(f"no starter for {kernel_type} yet")
    spec = get_spec(kernel_type)
    # The smoke shape in every dtype, interpreted; and a realistic shape, recorded without
    # interpreting: the block sizes a GPU run would use.
    results = check_kernel_file(path, recorded=[(spec.bench_shapes[0], torch.bfloat16)])
    failures = [f"{r.kernel} [{r.context}]: {r.error}" for r in results if not r.ok]
    assert not failures, "\n".join(failures)
