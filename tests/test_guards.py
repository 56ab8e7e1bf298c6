"""The in-worker detectors of `autokernel.harness.guards` on their own, in this process: each must
see the cheat it exists for, and must not see Triton's own work or the harness's.

End-to-end verdicts on whole kernel files are in test_harness.py; these pin down the mechanisms
(the red team's issue-12 classes 1 and 2) so a torch or Triton upgrade that blinds one fails here.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from conftest import DEVICE

from autokernel.harness.guards import (
    FallbackRecorder,
    HostReadError,
    IdentitySnapshot,
    LaunchMonitor,
    module_tensors,
)


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def _exp_by_hook(input, out):
    pass


@pytest.fixture
def monitor() -> Iterator[LaunchMonitor]:
    """An installed launch monitor, its hooks removed again afterwards (they are class-wide)."""
    import torch.utils.dlpack
    from triton.compiler.compiler import CompiledKernel

    from autokernel.cuda.runtime import Extension
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    saved = [(JITFunction, "run", JITFunction.__dict__["run"]),
             (InterpretedFunction, "run", InterpretedFunction.__dict__["run"]),
             (CompiledKernel, "__getitem__", CompiledKernel.__dict__["__getitem__"]),
             (torch.cuda.Stream, "__new__", torch.cuda.Stream.__dict__["__new__"]),
             (torch.cuda.CUDAGraph, "replay", torch.cuda.CUDAGraph.__dict__["replay"]),
             (Extension, "launch", Extension.__dict__["launch"])]
    functions = [(module, name, getattr(module, name))
                 for module, name in ((torch.cuda, "set_stream"), (torch._C, "_to_dlpack"),
                                      (torch, "to_dlpack"), (torch.utils.dlpack, "to_dlpack"))]
    launches = LaunchMonitor(DEVICE)
    launches.install()
    try:
        yield launches
    finally:
        for cls, name, value in saved:
            setattr(cls, name, value)
        for module, name, value in functions:
            setattr(module, name, value)


def guarded(monitor: LaunchMonitor, recorder: FallbackRecorder, fn: Callable[[], Any]) -> Any:
    """fn() as the worker runs a candidate's call: monitor armed, recorder on."""
    recorder.reset()
    monitor.armed = True
    try:
        with recorder:
            return fn()
    finally:
        monitor.armed = False


# -- host reads (class 1) -----------------------------------------------------------------------

HOST_READS: dict[str, Callable[[torch.Tensor], Any]] = {
    "numpy": lambda x: x.numpy(),
    "asarray": lambda x: np.asarray(x),
    "ufunc": lambda x: np.exp(x),
    "tolist": lambda x: x.tolist(),
    "item": lambda x: x[0].item(),
    "float": lambda x: float(x[0]),
    "int": lambda x: int(x[0]),
    "bool": lambda x: bool(x[0]),
    "index": lambda x: [0, 1, 2][x[1].to(torch.int64)],
    "base class": lambda x: torch._C.TensorBase.numpy(x),
    "super": lambda x: super(torch.Tensor, x).numpy(),
    "dlpack": lambda x: np.from_dlpack(x),
    "storage": lambda x: x.untyped_storage().tolist(),
    "repr": lambda x: repr(x),
    "apply": lambda x: x.clone().apply_(lambda v: v),
    "format": lambda x: f"{x[0]:.3f}",
}


@pytest.mark.parametrize("route", sorted(HOST_READS))
def test_every_route_to_a_tensors_values_raises_and_is_recorded(
        route: str, monitor: LaunchMonitor) -> None:
    recorder = FallbackRecorder(monitor, torch.device("cpu"))
    x = torch.arange(4, dtype=torch.float32)
    with pytest.raises(HostReadError, match="on the host"):
        guarded(monitor, recorder, lambda: HOST_READS[route](x))
    assert any("host read" in v for v in recorder.violations), recorder.violations
    assert x.numpy().shape == (4,)  # the guard is gone with the recorder


def test_dlpack_export_is_refused_while_the_candidate_runs(monitor: LaunchMonitor) -> None:
    import torch.utils.dlpack

    recorder = FallbackRecorder(monitor, torch.device("cpu"))
    x = torch.ones(3)
    for export in (torch.utils.dlpack.to_dlpack, torch.to_dlpack, torch._C._to_dlpack):
        with pytest.raises(HostReadError, match="dlpack"):
            guarded(monitor, recorder, lambda export=export: export(x))
        assert recorder.violations == ["torch.to_dlpack (a host read of tensor values)"]
    assert torch.utils.dlpack.to_dlpack(x) is not None  # disarmed: the harness may
    assert monitor.tampered() == []
    torch.to_dlpack = torch.utils.dlpack.from_dlpack  # any other function: tampering
    assert monitor.tampered() == ["torch.to_dlpack"]


@pytest.mark.gpu
def test_a_replayed_cuda_graph_is_refused(monitor: LaunchMonitor) -> None:
    recorder = FallbackRecorder(monitor, torch.device("cuda"))
    x = torch.randn(4, 8, device="cuda")
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.softmax(x, -1)  # warm up outside the capture
        with torch.cuda.graph(graph):
            y = torch.softmax(x, -1)
    torch.cuda.synchronize()
    guarded(monitor, recorder, graph.replay)
    assert any("CUDAGraph.replay" in v for v in recorder.violations), recorder.violations
    assert torch.allclose(y, torch.softmax(x, -1))


def test_a_caught_host_read_is_still_recorded(monitor: LaunchMonitor) -> None:
    recorder = FallbackRecorder(monitor, torch.device("cpu"))

    def swallow() -> None:
        try:
            torch.ones(2).tolist()
        except HostReadError:
            pass

    guarded(monitor, recorder, swallow)
    assert recorder.violations == ["Tensor.tolist (a host read of tensor values)"]


def test_metadata_and_triton_launches_are_not_host_reads(monitor: LaunchMonitor) -> None:
    recorder = FallbackRecorder(monitor, torch.device(DEVICE))
    x = torch.arange(8, dtype=torch.float32, device=DEVICE)

    def honest() -> torch.Tensor:
        y = torch.empty_like(x.contiguous())
        assert x.shape[0] == x.numel() == 8 and x.stride() == (1,) and x.data_ptr() != 0
        _copy[(1,)](x, y, x.numel(), BLOCK=16)
        return y

    y = guarded(monitor, recorder, honest)
    assert recorder.violations == []
    assert torch.equal(y, x)


def test_timed_calls_refuse_host_reads_too(monitor: LaunchMonitor) -> None:
    # A candidate that read values on the host only when its call is timed (allocations not
    # poisoned) would compute in Python unseen: the host-read guard stays on in every call.
    recorder = FallbackRecorder(monitor, torch.device("cpu"))
    recorder.poison_allocations = False
    with pytest.raises(HostReadError):
        guarded(monitor, recorder, lambda: torch.ones(2).tolist())


# -- operators that are not torch's own, and code inside a launch (class 2) ---------------------

def test_an_op_defined_after_the_recorder_is_refused_whatever_its_name(
        monitor: LaunchMonitor) -> None:
    recorder = FallbackRecorder(monitor, torch.device("cpu"))
    with torch.library._scoped_library("akguardtest", "FRAGMENT") as library:
        library.define("clone(Tensor x) -> Tensor")
        library.impl("clone", lambda x: torch.softmax(x, -1), "CompositeExplicitAutograd")
        guarded(monitor, recorder, lambda: torch.ops.akguardtest.clone(torch.ones(2, 3)))
    assert any(v.startswith("akguardtest::clone") and "not one of torch's own" in v
               for v in recorder.violations), recorder.violations


def test_a_new_overload_of_an_allowed_aten_op_is_refused(monitor: LaunchMonitor) -> None:
    recorder = FallbackRecorder(monitor, torch.device("cpu"))
    with torch.library._scoped_library("aten", "FRAGMENT") as library:
        library.define("clone.akguardtest(Tensor self) -> Tensor")
        library.impl("clone.akguardtest", lambda x: torch.softmax(x, -1),
                     "CompositeExplicitAutograd")
        guarded(monitor, recorder, lambda: torch.ops.aten.clone.akguardtest(torch.ones(2, 3)))
    assert any("aten::clone.akguardtest" in v for v in recorder.violations), recorder.violations


def test_an_allowed_op_whose_kernel_was_replaced_is_refused(monitor: LaunchMonitor) -> None:
    recorder = FallbackRecorder(monitor, torch.device("cpu"))
    x = torch.randn(2, 3)
    with torch.library._scoped_library("aten", "IMPL") as library:
        library.impl("new_ones", lambda x, size, **kwargs: torch.softmax(x, -1), "CPU")
        out = guarded(monitor, recorder, lambda: x.new_ones((2, 3)))
    assert torch.allclose(out, torch.softmax(x, -1))  # the override did run...
    assert any("new_ones" in v and "re-registered" in v for v in recorder.violations)
    guarded(monitor, recorder, lambda: x.new_ones((2, 3)))  # ...and is gone again
    assert recorder.violations == []


def test_torch_code_inside_a_launch_is_refused(monitor: LaunchMonitor) -> None:
    recorder = FallbackRecorder(monitor, torch.device(DEVICE))
    x = torch.randn(8, device=DEVICE)
    out = torch.empty_like(x)
    # Compiled launches pass their options (debug=...) to the hooks as well: keep the tensors.
    _exp_by_hook.add_pre_run_hook(lambda x, out, **options: torch.exp(x, out=out))
    try:
        guarded(monitor, recorder, lambda: _exp_by_hook[(1,)](x, out=out))
    finally:
        _exp_by_hook.pre_run_hooks.clear()
    assert torch.allclose(out, torch.exp(x))  # the hook computed, not the (empty) kernel
    found = " ".join(recorder.violations)
    assert "pre-run hook on _exp_by_hook()" in found
    # The interpreter runs the hook inside the launch it records; a compiled launch runs it just
    # before, and the hook's own refusal names it.
    assert "exp" in found and ("inside a Triton launch" in found or "inside its launch" in found)


# -- process-wide state: registrations, Triton hooks, tensors kept by the candidate --------------

def test_the_snapshot_sees_registrations_and_launch_hooks() -> None:
    from triton import knobs

    snapshot = IdentitySnapshot.take({})
    assert snapshot.changes() == []
    with torch.library._scoped_library("akguardsnapshot", "FRAGMENT"):
        assert "torch.library.Library('akguardsnapshot', 'FRAGMENT') created (an operator or " \
               "kernel registered by kernel.py)" in snapshot.changes()
    saved = knobs.runtime.jit_cache_hook
    knobs.runtime.jit_cache_hook = lambda *args, **kwargs: False
    try:
        assert "triton.knobs.runtime.jit_cache_hook set (a Triton launch hook)" \
            in snapshot.changes()
    finally:
        knobs.runtime.jit_cache_hook = saved


def test_the_snapshot_sees_a_changed_dispatcher_table() -> None:
    snapshot = IdentitySnapshot.take({})
    snapshot.changes()  # settles
    with torch.library._scoped_library("aten", "IMPL") as library:
        library.impl("new_zeros", lambda x, size, **kwargs: x, "CPU")
        found = snapshot.changes()
    assert "aten::new_zeros dispatcher kernels changed" in found


CANDIDATE = """
import collections
import torch

CONSTANT = torch.ones(2)       # made at import: a constant, not state
_POOL = collections.defaultdict(list)


def kernel_fn(x):
    holder = _POOL[x.shape]
    holder.append(torch.empty_like(x))
    return holder[-1]
"""


def test_tensors_made_at_call_time_and_kept_by_the_candidate_are_reported(
        tmp_path: Path) -> None:
    snapshot = IdentitySnapshot.take({})
    path = tmp_path / "kernel.py"
    path.write_text(CANDIDATE)
    spec = importlib.util.spec_from_file_location("akguard_candidate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["akguard_candidate"] = module
    try:
        spec.loader.exec_module(module)
        assert snapshot.changes() == []  # after import: the candidate's module is found
        assert snapshot.watched == [module]
        module.kernel_fn(torch.zeros(3))
        found = snapshot.changes()
        assert len(found) == 1 and "[call-time-state]" in found[0]
        assert "_POOL[torch.Size([3])][0]" in found[0]
        assert "CONSTANT" not in found[0]
    finally:
        del sys.modules["akguard_candidate"]


def test_module_state_is_walked_wherever_a_tensor_can_hide() -> None:
    module = types.ModuleType("akguard_walk")
    exec(textwrap.dedent("""
        import functools
        import torch

        class Holder:
            kept = [torch.ones(1)]

            def __init__(self):
                self.value = {"a": (torch.ones(2),)}

        def make():
            hidden = [torch.ones(3)]

            def inner(x, cache={"k": torch.ones(4)}):
                return hidden
            return inner

        INSTANCE = Holder()
        CLOSURE = make()
        PARTIAL = functools.partial(print, torch.ones(5))
        NUMBER = 3
    """), module.__dict__)  # noqa: S102 - a module of the test's own source
    found = sorted(module_tensors(module).values())
    assert found == ["CLOSURE closure[0][0]", "CLOSURE defaults[0]['k']", "Holder.kept[0]",
                     "INSTANCE.value['a'][0]", "PARTIAL[0]"]
