"""Red team 4's scan escapes and the gates behind them (issue 26's fourth round).

Class 1: objects of forbidden modules re-exported by allowed ones (`torch.xpu.cast` is
ctypes.cast, `triton.language.extra.modules` is sys.modules, `triton.compiler.compiler.Path` is
pathlib.Path): the scan resolves what every attribute path reaches and refuses it by identity.
Class 2: host compute on raw memory between or after the launches (`guards.host_writes`).
Class 3: a numpy-bodied kernel off the smoke shape (the sm_90 gate sees every correctness call).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_guards import monitor  # noqa: F401 - the installed launch monitor fixture

from autokernel.harness.scan_rules import forbidden_object, foreign_module
from autokernel.harness.static_scan import scan_source

RED_TEAM = Path(__file__).parent / "adversarial" / "judge"
STARTERS = Path(__file__).parent.parent / "autokernel" / "kernels"
# torch.xpu re-exports ctypes' names in some torch builds only (2.13's CPU wheel does, 2.11+cu130
# does not): where it does not, the attack cannot even import, and there is nothing to refuse.
NO_XPU_CTYPES = pytest.mark.skipif(not hasattr(torch.xpu, "cast"),
                                   reason="this torch's torch.xpu re-exports no ctypes names")


def xpu(*values: str) -> object:
    return pytest.param(*values, marks=NO_XPU_CTYPES)


@pytest.mark.parametrize("name,text", [
    xpu("rt4_xpu_ctypes_host_softmax.py", "torch.xpu.cast, which is ctypes.cast"),
    ("rt4_extra_modules_tell.py", "triton.language.extra.modules, which is sys.modules"),
    ("rt4_pathlib_landlock_tell.py", "triton.compiler.compiler.Path, which is pathlib.Path"),
])
def test_the_scan_refuses_forbidden_objects_behind_allowed_modules(name: str, text: str) -> None:
    found = scan_source((RED_TEAM / name).read_text())
    assert any(v.rule == "module-escape" and text in v.message for v in found), found


def test_forbidden_object_by_identity() -> None:
    import builtins
    import collections.abc
    import ctypes
    import functools
    import os
    import pathlib
    import sys

    import torch

    assert "ctypes.cast" in forbidden_object(ctypes.cast)
    assert "pathlib.Path" in forbidden_object(pathlib.Path)
    assert "sys.modules" in forbidden_object(sys.modules)
    assert "builtins.open" in forbidden_object(builtins.open)
    assert "os.system" in forbidden_object(os.system)
    assert "the namespace of the module torch" == forbidden_object(vars(torch))
    assert "the module os" in forbidden_object(os)
    # What allowed modules export themselves, constants and builtins stay allowed, even where a
    # forbidden module re-exports them (os.Mapping is collections.abc.Mapping).
    for value in (collections.abc.Mapping, functools.partial, len, int, "/", 3, None, torch,
                  torch.float16, torch.empty, Exception):
        assert forbidden_object(value) is None, value


@pytest.mark.parametrize("path", [xpu("torch.xpu.c_void_p"), xpu("torch.xpu.pointer"),
                                  xpu("torch.xpu.byref"),
                                  "torch.hub.Path", "triton.language.extra.modules.get",
                                  "torch.utils.weak.ref"])
def test_foreign_module_follows_every_value(path: str) -> None:
    assert foreign_module(path) is not None


@pytest.mark.parametrize("path", ["torch.empty", "torch.float16.itemsize", "triton.next_power_of_2",
                                  "triton.language.constexpr", "numpy.float32", "math.inf",
                                  "functools.partial", "collections.abc.Mapping"])
def test_foreign_module_leaves_honest_paths(path: str) -> None:
    assert foreign_module(path) is None


@pytest.mark.parametrize("starter", sorted(p.name for p in STARTERS.glob("*.py")
                                           if not p.name.startswith("_")))
def test_starters_still_pass_the_scan(starter: str) -> None:
    source = (STARTERS / starter).read_text()
    if "kernel_fn" not in source:
        pytest.skip("not a kernel file")
    assert scan_source(source) == []


# -- the sm_90 compile gate sees every correctness call, not the smoke call only -----------------

def _launches(kernel: object, *calls: tuple[object, ...]) -> list[tuple[object, ...]]:
    return [(kernel.fn, grid, args, {"BLOCK": block}) for grid, args, block in calls]


def test_requests_are_one_per_specialisation_with_the_largest_grid() -> None:
    import torch
    import triton
    import triton.language as tl

    from autokernel.harness.aot_gate import requests_from_launches

    @triton.jit
    def copy_rows(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        tl.store(y_ptr + cols, tl.load(x_ptr + cols, mask=cols < n), mask=cols < n)

    x16, x32 = torch.zeros(64, dtype=torch.float16), torch.zeros(64)
    first = requests_from_launches(_launches(copy_rows, ((4,), (x16, x16, 37), 64)), "smoke")
    later = requests_from_launches(_launches(
        copy_rows, ((9,), (x16, x16, 37), 64), ((2,), (x16, x16, 48), 64),  # one request
        ((2,), (x32, x32, 37), 64), ((2,), (x16, x16, 37), 128)), "sweep", first)
    assert [(r["context"], r["grid"]) for r in later] == [
        ("smoke", [9, 1, 1]), ("sweep", [2, 1, 1]), ("sweep", [2, 1, 1])]


def test_compile_requests_may_be_none_but_not_unbounded() -> None:
    from autokernel.harness.aot_gate import MAX_REQUESTS, decode_requests

    assert decode_requests([]) == []
    with pytest.raises(ValueError):
        decode_requests([{}] * (MAX_REQUESTS + 1))


def test_a_numpy_body_off_the_smoke_shape_fails_the_gpu_compile(tmp_path: Path) -> None:
    """rt4_aot_gate_smoke_only.py: a compilable kernel at the smoke shape, a numpy-bodied one at
    every other: its first shape_sweep launch is lowered to Triton IR and refused."""
    from conftest import DEVICE

    from autokernel.harness import runner
    from autokernel.harness.result import Status

    if DEVICE != "cpu":
        pytest.skip("the interpreter's gap")
    result = runner.run_bench(RED_TEAM / "rt4_aot_gate_smoke_only.py", device="cpu", quick=True,
                              cache_dir=tmp_path / "cache", only_stages=["smoke", "shape_sweep"])
    assert result.status is Status.FAIL and result.rule == "gpu-compile", result.reason
    assert "softmax_numpy [shape_sweep" in result.reason and "sm_90" in result.reason


# -- host writes to tensor memory that no launch and no torch op made (CPU) ----------------------

def _host_write(t: "torch.Tensor") -> None:  # noqa: F821 - what ctypes over an address does
    import ctypes

    ctypes.memset(t.data_ptr(), 0x7F, 4)


@pytest.fixture
def cpu_monitor(monitor):  # noqa: ANN001, ANN201 - test_guards' installed monitor, on the CPU
    from conftest import DEVICE

    if DEVICE != "cpu":
        pytest.skip("host memory is tensor memory on the CPU only")
    return monitor


@pytest.mark.parametrize("when", ["after the launch", "before the launch", "never"])
def test_a_host_write_between_or_after_launches_is_refused(cpu_monitor, when: str) -> None:
    import torch
    from test_guards import _copy, guarded

    from autokernel.harness.guards import FallbackRecorder

    recorder = FallbackRecorder(cpu_monitor, torch.device("cpu"))
    x = torch.arange(8, dtype=torch.float32)

    def call() -> torch.Tensor:
        staging = x.clone()  # a torch op writes it: known
        if when == "before the launch":
            _host_write(staging)
        y = torch.empty_like(x)
        _copy[(1,)](staging, y, x.numel(), BLOCK=16)
        y[6:] = 0  # torch ops may write after a launch
        if when == "after the launch":
            _host_write(y)
        return y

    guarded(cpu_monitor, recorder, call)
    found = [v for v in recorder.violations if "host write" in v]
    assert len(found) == (when != "never"), recorder.violations
    if when == "before the launch":
        assert "before a launch of _copy" in found[0]
    elif when == "after the launch":
        assert "kernel_fn returned" in found[0]


def test_the_ledger_alone() -> None:
    import torch

    from autokernel.harness.guards.host_writes import HostWriteLedger

    ledger = HostWriteLedger()
    t = torch.ones(4)
    ledger.check(t, "a")  # never seen: nothing to compare
    ledger.note([{"k": t}])
    ledger.check((t,), "b")
    assert ledger.findings == []
    _host_write(t[1:])
    ledger.close()
    assert len(ledger.findings) == 1 and ledger.known == {}


def test_host_compute_after_a_copying_launch_is_refused_without_the_scan(tmp_path: Path) -> None:
    """rt4_xpu_ctypes_host_softmax.py: Triton copies x into y, numpy computes the softmax in y's
    memory through ctypes (only when the launch ran, so the ghost replay sees poison)."""
    from conftest import DEVICE

    from autokernel.harness import runner
    from autokernel.harness.result import Status

    if DEVICE != "cpu":
        pytest.skip("host memory is tensor memory on the CPU only")
    result = runner.run_bench(RED_TEAM / "rt4_xpu_ctypes_host_softmax.py", device="cpu",
                              quick=True, static_scan=False, cache_dir=tmp_path / "cache",
                              only_stages=["smoke"])
    assert result.status is Status.REJECTED and result.rule == "library-fallback", result.reason
    assert "a host write to tensor memory" in result.reason and result.stage == "smoke"


def test_the_compile_plan_compiles_the_first_call_and_lowers_the_rest() -> None:
    from autokernel.harness import aot_gate

    def item(context: str, block: int, warps: int) -> dict[str, object]:
        return {"kernel": "k", "context": context, "signature": {"x": "*fp32"},
                "constexprs": [[[1], block]], "attrs": [], "options": {"num_warps": warps},
                "grid": [1, 1, 1]}

    items = [item("smoke", 64, 4), item("smoke", 64, 8), item("sweep", 64, 4),
             item("sweep", 64, 8), item("edge", 128, 4)]
    plan = aot_gate._plan(items)
    assert [(r.context, r.frontend_only) for r in plan] == [
        ("smoke", False), ("smoke", False), ("sweep", True), ("edge", True)]
    many = [item("smoke", 1, 4)] + [item("sweep", b, 4) for b in range(2, 400)]
    assert len(aot_gate._plan(many)) == 1 + aot_gate.MAX_LOWERED


@pytest.mark.parametrize("source", [
    xpu("import torch\nX = torch.xpu\ndef kernel_fn(x):\n    return X.cast\n"),
    xpu("import torch\ndef kernel_fn(x):\n    return getattr(torch.xpu, 'pointer')\n"),
    xpu("from torch import xpu as X\ndef kernel_fn(x):\n    return X.c_void_p\n"),
    "import triton.language.extra as E\ndef kernel_fn(x):\n    return E.modules['gc']\n",
])
def test_the_objects_are_refused_however_they_are_reached(source: str) -> None:
    found = scan_source(source)
    assert any(v.rule == "module-escape" and "of the module" in v.message for v in found), found
