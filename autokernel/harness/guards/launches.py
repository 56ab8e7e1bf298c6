"""`LaunchMonitor`: counts the candidate's launches (each backend hooks its launch path in through
`wrap_run`/`wrap_getitem` or its own wrapper, `KernelBackend.install_launch_counter`), checks
their stream, skips them in ghost mode, and watches the side doors to another stream."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from autokernel.harness.guards.frames import _GUARD_FILES, _TORCH_PREFIXES, _source_prefixes
from autokernel.harness.guards.host_reads import HostReadError
from autokernel.harness.guards.host_writes import HostWriteLedger
from autokernel.text import count_of

def _current_raw_stream() -> int:
    """The current CUDA stream's handle, as Triton's launcher reads it (no Stream object is
    built, so the stream-creation watch below is not involved)."""
    return torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())


def _signature(compiled: Any, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
               ) -> tuple[Any, ...]:
    """One launch as the GPU sees it: the compiled kernel (its hash covers source, constexprs,
    specialization and options), the grid, and the scalar arguments."""
    scalars = tuple(a for a in (*args, *(kwargs[k] for k in sorted(kwargs)))
                    if isinstance(a, (bool, int, float, str)))
    if callable(grid):
        try:
            grid = grid(kwargs)
        except Exception:  # noqa: BLE001 - a grid that needs more than the kwargs: named only
            grid = "callable"
    name = getattr(compiled, "hash", None) or getattr(getattr(compiled, "fn", None), "__name__",
                                                      type(compiled).__name__)
    return (str(name), repr(grid), scalars)


def launch_digest(signatures: list[tuple[Any, ...]]) -> str:
    """A short digest of the launches of one call, in order."""
    import hashlib

    return hashlib.sha256(repr(signatures).encode()).hexdigest()[:16]


class LaunchMonitor:
    """Counts Triton launches, checks their stream, and can skip them (ghost mode)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.launches = 0
        self.in_launch = 0
        self.ghost = False
        self.stream_violations: list[str] = []
        self.expected_stream: int | None = None
        self._last_result: dict[int, Any] = {}
        self.installed: dict[str, tuple[type, str, Any]] = {}
        self.installed_functions: dict[str, Callable[..., Any]] = {}
        self.armed = False  # True while the candidate's code runs
        self.triton_prefixes: tuple[str, ...] = ()
        # What a launch revealed while armed (a pre-run hook); reported through the recorder.
        self.findings: list[str] = []
        # While a list: what each launch ran (compiled kernel, grid, scalar arguments), for
        # `launch_digest` (two kernel files that launch the same things time the same).
        self.signatures: list[tuple[Any, ...]] | None = None
        # While a list: each interpreted launch's (function, grid, args, kwargs), for the CPU's
        # ahead-of-time compile check (`harness.aot_gate`).
        self.recorded: list[tuple[Any, Any, tuple[Any, ...], dict[str, Any]]] | None = None
        # While a correctness call runs on the CPU: what memory held after each launch
        # (`host_writes`), set by the recorder.
        self.ledger: HostWriteLedger | None = None

    # The wrappers are closures over `monitor`, not bound methods, so that a candidate cannot
    # reach the monitor's state through them without private attribute access.
    def install(self) -> None:
        """Every backend's launch path counted (`KernelBackend.install_launch_counter`), then
        the stream and side-door watches."""
        import triton

        from autokernel.backends import all_backends

        self.triton_prefixes = _source_prefixes(triton.__file__)
        if self.device == "cuda":
            self.expected_stream = _current_raw_stream()
        for backend in all_backends():
            backend.install_launch_counter(self)
        self._watch_streams()
        self._watch_side_doors()

    def _watch_streams(self) -> None:
        """Creating a CUDA stream or switching to one while the candidate runs is flagged, even
        when nothing is launched on it (the launch check covers launches, however the stream was
        made)."""
        monitor = self
        stream_class = torch.cuda.Stream
        original_new = stream_class.__new__
        original_set_stream = torch.cuda.set_stream

        def new(cls: type, *args: Any, **kwargs: Any) -> Any:
            # torch.cuda.current_stream() and Event.record() wrap an existing stream by its
            # stream_id; only a stream made from nothing is a new one.
            if monitor.armed and "stream_id" not in kwargs:
                monitor.stream_violations.append("kernel_fn created a CUDA stream")
            return original_new(cls, *args, **kwargs)

        def set_stream(stream: Any) -> Any:
            if monitor.armed:
                monitor.stream_violations.append("kernel_fn switched the current CUDA stream")
            return original_set_stream(stream)

        stream_class.__new__ = staticmethod(new)
        torch.cuda.set_stream = set_stream
        self.installed["torch.cuda.Stream.__new__"] = (stream_class, "__new__",
                                                       stream_class.__dict__["__new__"])
        self.installed_functions = {"torch.cuda.set_stream": set_stream}

    def _watch_side_doors(self) -> None:
        """Two ways past the recorder and the host-read guard that are no tensor method and no
        aten op: a dlpack capsule of a tensor (numpy can read it), and a captured CUDA graph
        replayed (torch work that dispatches nothing). Refused while the candidate runs."""
        import torch.utils.dlpack

        monitor = self
        original_to_dlpack = torch._C._to_dlpack

        def to_dlpack(*args: Any, **kwargs: Any) -> Any:
            if monitor.armed:
                monitor.findings.append("torch.to_dlpack (a host read of tensor values)")
                raise HostReadError("kernel_fn exported a tensor through dlpack")
            return original_to_dlpack(*args, **kwargs)

        for module, name in ((torch._C, "_to_dlpack"), (torch, "to_dlpack"),
                             (torch.utils.dlpack, "to_dlpack")):
            if getattr(module, name, None) is original_to_dlpack:
                setattr(module, name, to_dlpack)
                self.installed_functions[f"{module.__name__}.{name}"] = to_dlpack
        graph = torch.cuda.CUDAGraph
        original_replay = graph.replay

        def replay(self: Any, *args: Any, **kwargs: Any) -> Any:
            # Triton's own do_bench_cudagraph (an autotuner with use_cuda_graph) replays the
            # candidate's Triton kernels: allowed.
            caller = sys._getframe(1).f_code.co_filename
            if monitor.armed and not caller.startswith(monitor.triton_prefixes):
                monitor.findings.append("torch.cuda.CUDAGraph.replay (captured torch work run "
                                        "outside the file's Triton launches)")
            return original_replay(self, *args, **kwargs)

        graph.replay = replay
        self.installed["torch.cuda.CUDAGraph.replay"] = (graph, "replay", replay)

    def check_stream(self, explicit: Any = None) -> None:
        if self.device != "cuda":
            return
        current = explicit if explicit is not None else _current_raw_stream()
        if current != self.expected_stream:
            self.stream_violations.append(
                f"a Triton kernel was launched on stream {current}, not the harness's stream"
            )

    def wrap_run(self, cls: type, label: str) -> None:
        original = cls.run
        monitor = self

        def run(fn: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            # Disarmed (the host launch-cost calls): cost nothing, so the candidate's launch
            # figure carries no harness overhead that eager's does not.
            recording = monitor.signatures is not None and not monitor.ghost
            if warmup or not (monitor.armed or monitor.ghost or recording):
                return original(fn, *args, grid=grid, warmup=warmup, **kwargs)
            monitor.launches += 1
            monitor.check_stream()
            monitor._check_hooks(fn)
            if monitor.ghost:
                return monitor._last_result.get(id(fn))
            ledger = monitor.ledger
            if ledger is not None:
                ledger.check((args, kwargs), f"a launch of {getattr(fn, '__name__', 'a kernel')}")
            monitor.in_launch += 1
            try:
                result = original(fn, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                monitor.in_launch -= 1
            if ledger is not None:
                ledger.note((args, kwargs))
            monitor._last_result[id(fn)] = result
            if monitor.recorded is not None and hasattr(fn, "fn"):
                monitor.recorded.append((fn.fn, grid, args, dict(kwargs)))
            if recording and monitor.signatures is not None:
                monitor.signatures.append(_signature(
                    result if getattr(result, "hash", None) else fn, grid, args, kwargs))
            return result

        run.__qualname__ = original.__qualname__
        cls.run = run
        self.installed[label] = (cls, "run", run)

    def wrap_getitem(self, cls: type, label: str) -> None:
        original = cls.__getitem__
        monitor = self

        def getitem(kernel: Any, grid: Any) -> Callable[..., Any]:
            runner = original(kernel, grid)
            if not (monitor.armed or monitor.ghost or monitor.signatures is not None):
                return runner

            def launch(*args: Any, stream: Any = None) -> Any:
                if monitor.signatures is not None and not monitor.ghost:
                    monitor.signatures.append(_signature(kernel, grid, args, {}))
                monitor.launches += 1
                monitor.check_stream(stream)
                if monitor.ghost:
                    return None
                monitor.in_launch += 1
                try:
                    return runner(*args, stream=stream)
                finally:
                    monitor.in_launch -= 1

            return launch

        cls.__getitem__ = getitem
        self.installed[label] = (cls, "__getitem__", getitem)

    def _check_hooks(self, fn: Any) -> None:
        """A pre-run hook runs the candidate's choice of code inside the launch, with the
        launch's arguments (`add_pre_run_hook(torch.exp)`): the hook, not the kernel, computes."""
        hooks = getattr(fn, "pre_run_hooks", None)
        if self.armed and hooks:
            name = getattr(getattr(fn, "fn", fn), "__name__", "a Triton kernel")
            self.findings.append(f"{count_of(len(hooks), 'pre-run hook')} on {name}() (code run "
                                 "inside its launch: a Triton launch hook)")

    def tampered(self) -> list[str]:
        """Hooks the candidate removed or replaced."""
        found = [label for label, (cls, attr, hook) in self.installed.items()
                 if cls.__dict__.get(attr) is not hook]
        for label, hook in self.installed_functions.items():
            module_name, _, attr = label.rpartition(".")
            if getattr(sys.modules.get(module_name), attr, None) is not hook:
                found.append(label)
        return found

    def launch_origin_is_triton(self, frame: types.FrameType | None) -> bool:
        """While inside a launch: does the op come from Triton's own code (not a hook of the
        candidate's)? The first frame outside torch and this file decides."""
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith(_TORCH_PREFIXES) or filename in _GUARD_FILES:
                frame = frame.f_back
                continue
            return filename.startswith(self.triton_prefixes)
        return False
