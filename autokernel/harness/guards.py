"""Cheat detectors that run inside the worker, around every call of the candidate.

They are installed before the candidate is imported, and everything they rely on is captured
then too, so a candidate that replaces a torch function, the timer or one of these hooks is caught
by `IdentitySnapshot` rather than silently believed.

- `IdentitySnapshot`: the functions and classes of torch, triton, the clock and the harness itself,
  by identity. Any replacement (`torch.softmax = f`, `triton.testing.do_bench = f`,
  `time.perf_counter = f`, `torch.cuda.Event.elapsed_time = f`) is tampering. So is any
  `torch.library` registration made after it was taken (every one goes through
  `torch._C._dispatch_library`, watched from then on), a changed dispatcher table of an aten op,
  a Triton launch hook set in `triton.knobs`, and (reported with the rule name call-time-state)
  tensors made at call time and still held by the candidate module's state after a call.
- `LaunchMonitor`: wraps Triton's launch paths (`JITFunction.run`, the interpreter's
  `InterpretedFunction.run`, `CompiledKernel[grid]`) to count the candidate's own launches, to
  check that each runs on the harness's CUDA stream, and, in ghost mode, to skip them: a
  candidate whose output is still right with every launch skipped did not compute it in Triton
  (the "ghost replay" defence against token launches plus a host-side answer). It also watches
  `torch.cuda.Stream` creation and `torch.cuda.set_stream` while the candidate runs.
- `FallbackRecorder`: a TorchDispatchMode that records every op the candidate runs outside its
  Triton launches. Only torch's own `aten::` allocation, layout and copy ops are allowed
  (`ALLOWED_ATEN_OPS`), by namespace and overload as they existed before the candidate was
  imported and with the dispatcher kernels they had then: anything that computes is a library
  fallback, and so is an op of the candidate's own (`torch.library.custom_op`), a new overload
  of an allowed op, or an allowed op whose kernel was re-registered. Inside a launch only the
  few ops Triton's launcher itself runs are allowed (`TRITON_LAUNCH_OPS`): anything else there was
  put there by a launch hook. While it records, `HostReadGuard` (a TorchFunctionMode) makes every
  host read of a tensor's values (`numpy()`, `tolist()`, `item()`, `float()`, numpy's
  `__array__`, dlpack, storages) raise: numpy or Python compute behind a token launch.
- `poison_allocator` / `poison_free_cache`: fill the memory the candidate's output will come from
  with 0xFF bytes (NaN in every float dtype), so an output element the kernel never writes can
  be seen, and a freed buffer holding a reference answer can never be handed to the candidate.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from typing_extensions import Self

from autokernel.harness.compare import POISON_BYTE

# aten ops a kernel_fn may run around its Triton launches, by overload-packet name. None of them
# computes a value from the inputs' values: they allocate, initialise, reshape, or move bytes.
ALLOWED_ATEN_OPS: frozenset[str] = frozenset({
    # Allocation and initialisation of outputs and scratch buffers (torch.empty/zeros/full...).
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "fill_", "zero_", "scalar_tensor", "lift_fresh", "lift_fresh_copy", "resize_",
    # Views and layout metadata: no data is read.
    "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand",
    "slice", "select", "unsqueeze", "squeeze", "narrow", "split", "split_with_sizes", "chunk",
    "unbind", "alias", "detach", "view_as", "unflatten", "flatten", "movedim",
    # Copies: making an input contiguous, or casting dtype (same device only, checked below).
    "contiguous", "clone", "copy_", "_to_copy", "to",
})

# Allocations whose memory is uninitialised: the recorder fills them with poison as they are
# made, so an output element the kernel never writes is always visible, whatever the allocator
# hands out (a stale buffer may hold an earlier answer: the reference's, or the kernel's own).
POISONED_ALLOCATIONS: frozenset[str] = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
})

# Ops that may move data between devices: allowed only when every tensor stays on the device.
DEVICE_CHECKED_OPS: frozenset[str] = frozenset({"copy_", "_to_copy", "to"})

# aten ops Triton's own launch path runs (the interpreter moves arguments into host storages and
# back; the GPU launcher runs none). Anything else inside a launch comes from a hook that a
# candidate installed (`JITFunction.add_pre_run_hook(torch.exp)`: a C function, so no frame of
# the candidate's file is on the stack to give it away).
TRITON_LAUNCH_OPS: frozenset[str] = frozenset({
    "empty", "empty_strided", "new_empty", "set_", "copy_", "_to_copy", "lift_fresh", "alias",
    "view", "as_strided", "detach",
})

# Tensor methods that hand a tensor's values to the host (Python numbers, lists, numpy arrays,
# dlpack capsules, storages, text).
HOST_READ_METHODS: frozenset[str] = frozenset({
    "numpy", "tolist", "item", "__array__", "__array_wrap__", "__dlpack__", "__float__",
    "__int__", "__index__", "__bool__", "__complex__", "__repr__", "__str__", "__format__",
    "untyped_storage", "storage", "_typed_storage", "__reduce_ex__", "__getstate__", "apply_",
    "map_", "map2_",
})


def _source_prefixes(module_file: str, directory: bool = True) -> tuple[str, ...]:
    """A module's location as code objects name it (the import path) and resolved (symlinks)."""
    path = Path(module_file)
    target = path.parent if directory else path
    forms = {str(target), str(target.resolve())}
    return tuple(f + os.sep if directory else f for f in forms)


_TORCH_PREFIXES = _source_prefixes(torch.__file__)
_THIS_FILE = _source_prefixes(__file__, directory=False)

# The dispatcher's introspection, captured before any candidate exists (one that replaced them
# could make every table read as unchanged).
_DUMP_TABLE = torch._C._dispatch_dump_table
_ALL_OP_NAMES = torch._C._dispatch_get_all_op_names


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

    # The wrappers are closures over `monitor`, not bound methods, so that a candidate cannot
    # reach the monitor's state through them without private attribute access.
    def install(self) -> None:
        import triton
        from triton.runtime.jit import JITFunction

        self.triton_prefixes = _source_prefixes(triton.__file__)
        if self.device == "cuda":
            self.expected_stream = _current_raw_stream()
        self._wrap_run(JITFunction, "JITFunction.run")
        try:
            from triton.runtime.interpreter import InterpretedFunction
        except ImportError:  # pragma: no cover - every triton 3.x has the interpreter
            InterpretedFunction = None  # noqa: N806
        if InterpretedFunction is not None:
            self._wrap_run(InterpretedFunction, "InterpretedFunction.run")
        try:
            from triton.compiler.compiler import CompiledKernel
        except ImportError:  # pragma: no cover
            CompiledKernel = None  # noqa: N806
        if CompiledKernel is not None:
            self._wrap_getitem(CompiledKernel, "CompiledKernel.__getitem__")
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

    def _check_stream(self, explicit: Any = None) -> None:
        if self.device != "cuda":
            return
        current = explicit if explicit is not None else _current_raw_stream()
        if current != self.expected_stream:
            self.stream_violations.append(
                f"a Triton kernel was launched on stream {current}, not the harness's stream"
            )

    def _wrap_run(self, cls: type, label: str) -> None:
        original = cls.run
        monitor = self

        def run(fn: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            # Disarmed (the host launch-cost calls): cost nothing, so the candidate's launch
            # figure carries no harness overhead that eager's does not.
            recording = monitor.signatures is not None and not monitor.ghost
            if warmup or not (monitor.armed or monitor.ghost or recording):
                return original(fn, *args, grid=grid, warmup=warmup, **kwargs)
            monitor.launches += 1
            monitor._check_stream()
            monitor._check_hooks(fn)
            if monitor.ghost:
                return monitor._last_result.get(id(fn))
            monitor.in_launch += 1
            try:
                result = original(fn, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                monitor.in_launch -= 1
            monitor._last_result[id(fn)] = result
            if recording and monitor.signatures is not None:
                monitor.signatures.append(_signature(
                    result if getattr(result, "hash", None) else fn, grid, args, kwargs))
            return result

        run.__qualname__ = original.__qualname__
        cls.run = run
        self.installed[label] = (cls, "run", run)

    def _wrap_getitem(self, cls: type, label: str) -> None:
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
                monitor._check_stream(stream)
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
            self.findings.append(f"{len(hooks)} pre-run hook(s) on {name}() (code run inside "
                                 "its launch: a Triton launch hook)")

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
            if filename.startswith(_TORCH_PREFIXES) or filename in _THIS_FILE:
                frame = frame.f_back
                continue
            return filename.startswith(self.triton_prefixes)
        return False


class HostReadError(RuntimeError):
    """A tensor's values were read on the host while the candidate ran."""


class HostReadGuard(TorchFunctionMode):
    """Makes every host read of a tensor's values raise while it is on the mode stack.

    Tensor methods reach Python's torch-function machinery whatever they were called through
    (`x.numpy()`, `torch._C.TensorBase.numpy(x)`, `super(torch.Tensor, x).numpy()`, numpy's
    `np.asarray(x)` through `__array__`, `float(x)`), so a mode sees them all; undoing it needs
    torch's private mode-stack API. Reads made by Triton's own launcher inside a launch, and by
    this file's recorder, are let through. Each refused read is also recorded, so a candidate that
    catches the exception is still rejected."""

    def __init__(self, monitor: LaunchMonitor, refused: list[str]) -> None:
        super().__init__()
        self.monitor = monitor
        self.refused = refused

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in HOST_READ_METHODS and not self._harness_read(sys._getframe(1)):
            self.refused.append(f"Tensor.{name} (a host read of tensor values)")
            raise HostReadError(f"kernel_fn read a tensor's values on the host (Tensor.{name}); "
                                "a kernel computes its output in Triton, not with numpy or "
                                "Python on the host")
        return func(*args, **(kwargs or {}))

    def _harness_read(self, frame: types.FrameType | None) -> bool:
        """The first frame outside torch decides: this file (the recorder), or Triton's own
        code inside a launch."""
        while frame is not None and frame.f_code.co_filename.startswith(_TORCH_PREFIXES):
            frame = frame.f_back
        if frame is None:
            return False
        if frame.f_code.co_filename in _THIS_FILE:
            return True
        return bool(self.monitor.in_launch) and self.monitor.launch_origin_is_triton(frame)


class FallbackRecorder(TorchDispatchMode):
    """Records ops that the candidate runs itself, outside Triton's launch machinery, and
    poisons the uninitialised memory it allocates. While it records, host reads of tensor
    values raise (`HostReadGuard`), unless `guard_host_reads` is off: in timed calls too, where it
    adds host time only (the timing protocol keeps the host ahead of the device)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps __torch_dispatch__ in a dynamo-disable that imports torch._dynamo on first
        # use (seconds of imports per worker); this mode never runs under torch.compile.
        return False

    def __init__(self, monitor: LaunchMonitor, device: torch.device) -> None:
        super().__init__()
        self.monitor = monitor
        self.device = device
        self._ops: list[str] = []
        self._verified: set[str] = set()
        # Off while timing: a fill inside the call would add device time to the candidate's
        # figure (the timed rounds check outputs by audits instead).
        self.poison_allocations = True
        self.guard_host_reads = True
        self._host_guard: HostReadGuard | None = None
        # Taken now, before the candidate exists: the ops it may use, as torch defined them.
        self.known_ops, self.kernel_tables = allowed_op_tables()

    @property
    def violations(self) -> list[str]:
        """Everything refused since the last reset: ops, host reads, launch hooks."""
        return self._ops + self.monitor.findings

    def reset(self) -> None:
        self._ops = []
        self._verified = set()
        self.monitor.findings.clear()

    def __enter__(self) -> Self:
        super().__enter__()
        if self.guard_host_reads:
            self._host_guard = HostReadGuard(self.monitor, self._ops)
            self._host_guard.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        guard, self._host_guard = self._host_guard, None
        try:
            if guard is not None:
                guard.__exit__(*exc)
        finally:
            super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        packet = getattr(func, "overloadpacket", None)
        name = getattr(packet, "__name__", str(func))
        aten = getattr(func, "namespace", None) == "aten"
        label = str(func).removeprefix("aten.")
        if self.monitor.in_launch and self.monitor.launch_origin_is_triton(sys._getframe(1)):
            if not (aten and name in TRITON_LAUNCH_OPS):
                self._ops.append(f"{label} (inside a Triton launch: code run by a launch hook)")
            return result
        if self.poison_allocations and name in POISONED_ALLOCATIONS \
                and isinstance(result, torch.Tensor):
            result.untyped_storage().fill_(POISON_BYTE)
        qualified = func.name() if callable(getattr(func, "name", None)) else label
        if not aten or qualified not in self.known_ops:
            self._ops.append(f"{qualified} (not one of torch's own aten ops: an op defined by "
                             "kernel.py)")
        elif name not in ALLOWED_ATEN_OPS:
            self._ops.append(label)
        elif qualified not in self._verified:
            self._verified.add(qualified)
            if _DUMP_TABLE(qualified) != self.kernel_tables.get(qualified):
                self._ops.append(f"{label} (its kernel was re-registered after kernel.py was "
                                 "imported)")
        if aten and name in ALLOWED_ATEN_OPS and self._off_device(name, args, kwargs, result):
            self._ops.append(f"{label} (device transfer)" if name in DEVICE_CHECKED_OPS
                             else f"{label} (a tensor off the harness's {self.device.type} device)")
        return result

    def _off_device(self, name: str, args: Any, kwargs: dict[str, Any], result: Any) -> bool:
        """Copies may not move data between devices, and on a GPU nothing may be made in host
        memory (a pinned buffer is reachable from both sides: host compute behind a copy)."""
        if name not in DEVICE_CHECKED_OPS and self.device.type != "cuda":
            return False
        tensors = [a for a in (*args, *kwargs.values(), result) if isinstance(a, torch.Tensor)]
        return any(t.device.type != self.device.type for t in tensors)


# Rebound by torch itself when torch._dynamo is first imported (it wraps manual_seed), which
# may happen lazily after the snapshot; the harness never calls it.
TORCH_REBINDS_LAZILY: frozenset[str] = frozenset({"torch.manual_seed"})


@dataclass
class IdentitySnapshot:
    """The callables of a set of namespaces, by identity, to catch replacement; and, with
    `watch_process`, the process-wide state a candidate could change without replacing anything:
    torch.library registrations, the dispatcher's aten tables, Triton's launch hooks, and the
    tensors the candidate's module holds.

    The first `changes()` after the candidate's import settles which modules are the
    candidate's (those imported since `take` from outside the installed libraries, or the ones
    given to `watch_module`) and which tensors they held at import; a tensor they hold after a
    later call was made at call time."""

    entries: dict[str, tuple[Any, dict[str, Any], bool]] = field(default_factory=dict)
    registrations: RegistrationWatch | None = None
    registrations_seen: int = 0
    tables: dict[str, str] = field(default_factory=dict)
    knobs: dict[str, Any] = field(default_factory=dict)
    modules_before: frozenset[str] = frozenset()
    watched: list[types.ModuleType] = field(default_factory=list)
    import_tensors: set[int] = field(default_factory=set)
    settled: bool = False

    @classmethod
    def take(cls, namespaces: dict[str, Any], watch_process: bool = True) -> IdentitySnapshot:
        snapshot = cls()
        for label, namespace in namespaces.items():
            if namespace is None:
                continue
            is_class = isinstance(namespace, type)
            saved = {k: v for k, v in vars(namespace).items()
                     if (callable(v) or isinstance(v, (staticmethod, classmethod, property)))
                     and f"{label}.{k}" not in TORCH_REBINDS_LAZILY}
            snapshot.entries[label] = (namespace, saved, is_class)
        if watch_process:
            snapshot.registrations = watch_registrations()
            snapshot.registrations_seen = len(snapshot.registrations.made)
            snapshot.tables = dispatch_tables()
            snapshot.knobs = knob_hooks()
            snapshot.modules_before = frozenset(sys.modules)
        return snapshot

    def watch_module(self, module: types.ModuleType) -> None:
        """Check `module`'s state for tensors kept across calls (those it holds now are its
        import-time constants)."""
        self.watched.append(module)
        self.import_tensors |= set(module_tensors(module))

    def changes(self) -> list[str]:
        """'torch.softmax replaced', ... (empty when nothing changed)."""
        missing = object()
        found: list[str] = []
        for label, (namespace, saved, is_class) in self.entries.items():
            current = vars(namespace)
            for name, value in saved.items():
                now = current.get(name, missing)
                if now is missing:
                    found.append(f"{label}.{name} deleted")
                elif now is not value:
                    found.append(f"{label}.{name} replaced")
            if is_class:
                # A new class attribute can shadow an inherited method (Tensor.add = f).
                added = [k for k, v in current.items() if k not in saved and callable(v)]
                found.extend(f"{label}.{name} added" for name in added)
        if self.registrations is not None:
            found.extend(self._registration_changes())
            found.extend(f"triton.knobs.runtime.{name} set (a Triton launch hook)"
                         for name, value in knob_hooks().items()
                         if value != self.knobs.get(name))
            found.extend(self._retained_tensors())
        return found

    def _registration_changes(self) -> list[str]:
        watch = self.registrations
        assert watch is not None
        found = []
        if torch._C._dispatch_library is not watch.wrapper:
            found.append("torch._C._dispatch_library replaced")
        made = watch.made[self.registrations_seen:]
        found.extend(f"{entry} created (an operator or kernel registered by kernel.py)"
                     for entry in made)
        if made or not self.settled:
            now = dispatch_tables()
            found.extend(f"aten::{name[6:]} dispatcher kernels changed"
                         for name, table in now.items() if self.tables.get(name, table) != table)
        return found

    def _retained_tensors(self) -> list[str]:
        if not self.settled:
            self.settled = True
            for name in sorted(set(sys.modules) - self.modules_before):
                module = sys.modules.get(name)
                if module is not None and _outside_libraries(module):
                    self.watch_module(module)
            return []
        held = [path for module in self.watched
                for identity, path in module_tensors(module).items()
                if identity not in self.import_tensors]
        if not held:
            return []
        return [(f"kernel.py keeps tensors made at call time in its module state "
                 f"({', '.join(held[:3])}): a result cache or an output pool "
                 "[call-time-state]")]


@dataclass
class RegistrationWatch:
    """Every `torch.library` registration made in this process since the watch was installed:
    Library(...), custom_op, triton_op, define/impl/register_* all create their C++ library
    through `torch._C._dispatch_library`, which `wrapper` replaces."""

    wrapper: Callable[..., Any]
    made: list[str]


_REGISTRATION_WATCH: list[RegistrationWatch] = []


def watch_registrations() -> RegistrationWatch:
    """Install the registration watch once per process (idempotent)."""
    if _REGISTRATION_WATCH and torch._C._dispatch_library is _REGISTRATION_WATCH[0].wrapper:
        return _REGISTRATION_WATCH[0]
    original = torch._C._dispatch_library
    made: list[str] = []

    def dispatch_library(kind: Any, namespace: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(f"torch.library.Library({namespace!r}, {str(kind).split('.')[-1]!r})")
        return original(kind, namespace, *args, **kwargs)

    torch._C._dispatch_library = dispatch_library
    watch = RegistrationWatch(dispatch_library, made)
    _REGISTRATION_WATCH[:] = [watch]
    return watch


def allowed_op_tables() -> tuple[frozenset[str], dict[str, str]]:
    """Every aten op's qualified name as of now (`aten::clone`, `aten::clone.out`), and the
    dispatcher table of each on the recorder's allow-lists."""
    names = frozenset(n for n in _ALL_OP_NAMES() if n.startswith("aten::"))
    allowed = ALLOWED_ATEN_OPS | TRITON_LAUNCH_OPS
    tables = {n: _DUMP_TABLE(n) for n in names
              if n.removeprefix("aten::").split(".")[0] in allowed}
    return names, tables


def dispatch_tables() -> dict[str, str]:
    """The dispatcher table (which kernel serves each dispatch key) of every aten op: ~0.1 s."""
    return {n: _DUMP_TABLE(n) for n in _ALL_OP_NAMES() if n.startswith("aten::")}


KNOB_HOOKS: tuple[str, ...] = (
    "launch_enter_hook", "launch_exit_hook", "kernel_load_start_hook", "kernel_load_end_hook",
    "jit_cache_hook", "jit_post_compile_hook", "add_stages_inspection_hook",
)


def knob_hooks() -> dict[str, Any]:
    """What Triton would call around each launch or compile (hook chains by their members)."""
    try:
        from triton import knobs
    except ImportError:  # pragma: no cover - triton < 3.4 has no knobs
        return {}
    found = {}
    for name in KNOB_HOOKS:
        value = getattr(knobs.runtime, name, None)
        members = getattr(value, "calls", None)
        found[name] = tuple(members) if isinstance(members, list) else value
    return found


@functools.cache
def _library_roots() -> tuple[str, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.add(str(Path(__file__).parents[1]))  # the autokernel package
    return tuple({form for root in roots for form in (root, str(Path(root).resolve()))})


def _outside_libraries(module: types.ModuleType) -> bool:
    """A module loaded from a file outside the standard library, the installed packages and
    autokernel: the candidate (kernel files are loaded from a temporary directory)."""
    location = getattr(module, "__file__", None)
    if not isinstance(location, str):
        return False
    resolved = str(Path(location).resolve())
    return not any(p.startswith(root + os.sep) for root in _library_roots()
                   for p in (location, resolved))


def module_tensors(module: types.ModuleType, max_depth: int = 8) -> dict[int, str]:
    """Tensors reachable from a module's state, by id, each with where it is held: globals,
    containers, the defaults, closures and attributes of the module's own functions, the
    attributes of its own classes and their instances, and of its Triton kernels."""
    from triton.runtime.jit import KernelInterface

    own = module.__name__
    found: dict[int, str] = {}
    seen: set[int] = set()
    pending: list[tuple[Any, str, int]] = [(v, k, 0) for k, v in vars(module).items()
                                           if not k.startswith("__")]
    while pending:
        value, path, depth = pending.pop()
        if id(value) in seen or depth > max_depth or isinstance(value, types.ModuleType):
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            found.setdefault(id(value), path)
            continue
        children: list[tuple[Any, str]] = []
        if isinstance(value, dict):
            children = [(v, f"{path}[{k!r}]"[:80]) for k, v in value.items()]
            children += [(k, f"{path} key") for k in value]
        elif isinstance(value, (list, tuple, set, frozenset)) or type(value).__name__ == "deque":
            children = [(v, f"{path}[{i}]") for i, v in enumerate(value)]
        elif isinstance(value, types.FunctionType) and value.__module__ == own:
            cells = [c.cell_contents for c in value.__closure__ or () if _filled(c)]
            children = [(value.__defaults__, f"{path} defaults"),
                        (value.__kwdefaults__, f"{path} defaults"),
                        (cells, f"{path} closure"), (vars(value), path)]
        elif hasattr(value, "__wrapped__") and not isinstance(value, type):
            children = [(value.__wrapped__, path)]  # functools.cache and lru_cache wrappers
        elif isinstance(value, functools.partial):
            children = [(value.func, path), (value.args, path), (value.keywords, path)]
        elif isinstance(value, type) and value.__module__ == own:
            children = [(v, f"{path}.{k}") for k, v in vars(value).items()
                        if not k.startswith("__")]
        elif type(value).__module__ == own or isinstance(value, KernelInterface):
            children = [(v, f"{path}.{k}") for k, v in getattr(value, "__dict__", {}).items()]
        pending.extend((child, where, depth + 1) for child, where in children
                       if child is not None)
    return found


def _filled(cell: types.CellType) -> bool:
    try:
        return cell.cell_contents is not cell  # always True once bound
    except ValueError:  # an empty cell: the variable is not bound yet
        return False


def harness_namespaces(kernel_type: str) -> dict[str, Any]:
    """What the reference, the stock baselines and the timer rely on."""
    import builtins
    import math
    import time

    import torch.nn.functional as F
    import triton
    import triton.testing
    from triton.runtime import autotuner, jit

    import autokernel.harness.candidate as candidate_module
    import autokernel.harness.channel as channel_module
    import autokernel.harness.compare as compare_module
    import autokernel.harness.guards as guards_module
    import autokernel.harness.inputs as inputs_module
    import autokernel.harness.timing as timing_module
    import autokernel.ops.spec as spec_module
    import autokernel.reference as reference_module
    from autokernel.ops import get_spec

    op_module = sys.modules[get_spec(kernel_type).stock.__module__]
    namespaces: dict[str, Any] = {
        "builtins": builtins, "time": time, "math": math, "threading": threading,
        "torch": torch, "torch.nn.functional": F, "torch.Tensor": torch.Tensor,
        "torch.TensorBase": torch._C.TensorBase, "torch.linalg": torch.linalg,
        "torch.special": torch.special, "torch.cuda": torch.cuda,
        "torch.cuda.Event": torch.cuda.Event, "torch.cuda.Stream": torch.cuda.Stream,
        "torch.Generator": torch.Generator,
        "TorchDispatchMode": TorchDispatchMode,
        "triton": triton, "triton.testing": triton.testing, "triton.runtime.jit": jit,
        "triton.runtime.autotuner": autotuner, "JITFunction": jit.JITFunction,
        "Autotuner": autotuner.Autotuner,
        "autokernel.reference": reference_module, "autokernel.ops.spec": spec_module,
        op_module.__name__: op_module,
        "autokernel.harness.compare": compare_module, "autokernel.harness.guards": guards_module,
        "autokernel.harness.timing": timing_module,
        "autokernel.harness.candidate": candidate_module,
        "autokernel.harness.inputs": inputs_module, "autokernel.harness.channel": channel_module,
        "LaunchMonitor": LaunchMonitor, "FallbackRecorder": FallbackRecorder,
    }
    try:
        from triton.runtime import interpreter
        namespaces["triton.runtime.interpreter"] = interpreter
        namespaces["InterpretedFunction"] = interpreter.InterpretedFunction
        namespaces["GridExecutor"] = interpreter.GridExecutor
    except ImportError:  # pragma: no cover
        pass
    try:
        from triton.compiler import compiler
        namespaces["CompiledKernel"] = compiler.CompiledKernel
    except ImportError:  # pragma: no cover
        pass
    return namespaces


def live_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None and t.is_alive()}


def new_threads(before: set[int]) -> list[str]:
    return [f"{t.name} ({type(t).__name__})" for t in threading.enumerate()
            if t.ident not in before and t.is_alive()]


def poison_allocator(nbytes: int, device: torch.device, blocks: int = 2,
                     pattern: int = POISON_BYTE) -> None:
    """Leave poisoned free blocks of `nbytes` where the candidate's next allocation comes from.

    CUDA's caching allocator hands out the best-fitting cached block, so every cached free block
    of this size is taken (and poisoned) until fresh memory is needed; glibc hands a freed chunk
    of the same size straight back. Either way the output starts as 0xFF bytes, not as a stale
    answer.
    """
    if nbytes <= 0:
        return
    held = []
    if device.type == "cuda":
        reserved = torch.cuda.memory_reserved(device)
        for _ in range(64):
            try:
                block = torch.empty(nbytes, dtype=torch.uint8, device=device)
            except torch.cuda.OutOfMemoryError:
                break  # every cached block that could serve this size is already poisoned
            block.fill_(pattern)
            held.append(block)
            if len(held) >= blocks and torch.cuda.memory_reserved(device) > reserved:
                break
    else:
        for _ in range(blocks):
            block = torch.empty(nbytes, dtype=torch.uint8, device=device)
            block.fill_(pattern)
            held.append(block)
    del held


def poison_free_cache(device: torch.device) -> int:
    """Fill every free block of CUDA's caching allocator with poison (after the reference
    phase, so no intermediate of an oracle survives in memory the candidate may be handed).
    Returns the bytes poisoned; 0 on CPU, where freed memory is not cached by torch."""
    if device.type != "cuda":
        return 0
    sizes = [block["size"] for segment in torch.cuda.memory_snapshot()
             if segment.get("device", device.index or 0) == (device.index or 0)
             for block in segment.get("blocks", []) if block.get("state") == "inactive"]
    held = []
    total = 0
    for size in sorted(sizes, reverse=True):
        try:
            block = torch.empty(size, dtype=torch.uint8, device=device)
        except torch.cuda.OutOfMemoryError:
            continue
        block.fill_(POISON_BYTE)
        held.append(block)
        total += size
    del held
    return total
