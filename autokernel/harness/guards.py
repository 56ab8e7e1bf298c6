"""Cheat detectors that run inside the worker, around every call of the candidate.

They are installed before the candidate is imported, and everything they rely on is captured
then too, so a candidate that replaces a torch function, the timer or one of these hooks is caught
by `IdentitySnapshot` rather than silently believed.

- `IdentitySnapshot`: the functions and classes of torch, triton, the clock and the harness itself,
  by identity. Any replacement (`torch.softmax = f`, `triton.testing.do_bench = f`,
  `time.perf_counter = f`, `torch.cuda.Event.elapsed_time = f`) is tampering.
- `LaunchMonitor`: wraps Triton's launch paths (`JITFunction.run`, the interpreter's
  `InterpretedFunction.run`, `CompiledKernel[grid]`) to count the candidate's own launches, to
  check that each runs on the harness's CUDA stream, and, in ghost mode, to skip them: a
  candidate whose output is still right with every launch skipped did not compute it in Triton
  (the "ghost replay" defence against token launches plus a host-side answer). It also watches
  `torch.cuda.Stream` creation and `torch.cuda.set_stream` while the candidate runs.
- `FallbackRecorder`: a TorchDispatchMode that records every aten op the candidate runs outside
  its Triton launches. Only allocation, layout and copy ops are allowed (`ALLOWED_ATEN_OPS`);
  anything that computes is a library fallback.
- `poison_allocator` / `poison_free_cache`: fill the memory the candidate's output will come from
  with 0xFF bytes (NaN in every float dtype), so an output element the kernel never writes can
  be seen, and a freed buffer holding a reference answer can never be handed to the candidate.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


def _source_prefixes(module_file: str, directory: bool = True) -> tuple[str, ...]:
    """A module's location as code objects name it (the import path) and resolved (symlinks)."""
    path = Path(module_file)
    target = path.parent if directory else path
    forms = {str(target), str(target.resolve())}
    return tuple(f + os.sep if directory else f for f in forms)


_TORCH_PREFIXES = _source_prefixes(torch.__file__)
_THIS_FILE = _source_prefixes(__file__, directory=False)


def _current_raw_stream() -> int:
    """The current CUDA stream's handle, as Triton's launcher reads it (no Stream object is
    built, so the stream-creation watch below is not involved)."""
    return torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())


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
            if warmup or not (monitor.armed or monitor.ghost):
                return original(fn, *args, grid=grid, warmup=warmup, **kwargs)
            monitor.launches += 1
            monitor._check_stream()
            if monitor.ghost:
                return monitor._last_result.get(id(fn))
            monitor.in_launch += 1
            try:
                result = original(fn, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                monitor.in_launch -= 1
            monitor._last_result[id(fn)] = result
            return result

        run.__qualname__ = original.__qualname__
        cls.run = run
        self.installed[label] = (cls, "run", run)

    def _wrap_getitem(self, cls: type, label: str) -> None:
        original = cls.__getitem__
        monitor = self

        def getitem(kernel: Any, grid: Any) -> Callable[..., Any]:
            runner = original(kernel, grid)
            if not (monitor.armed or monitor.ghost):
                return runner

            def launch(*args: Any, stream: Any = None) -> Any:
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

    def tampered(self) -> list[str]:
        """Hooks the candidate removed or replaced."""
        found = [label for label, (cls, attr, hook) in self.installed.items()
                 if cls.__dict__.get(attr) is not hook]
        if "torch.cuda.set_stream" in self.installed_functions \
                and torch.cuda.set_stream is not self.installed_functions["torch.cuda.set_stream"]:
            found.append("torch.cuda.set_stream")
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


class FallbackRecorder(TorchDispatchMode):
    """Records aten ops that the candidate runs itself, outside Triton's launch machinery, and
    poisons the uninitialised memory it allocates."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps __torch_dispatch__ in a dynamo-disable that imports torch._dynamo on first
        # use (seconds of imports per worker); this mode never runs under torch.compile.
        return False

    def __init__(self, monitor: LaunchMonitor, device: torch.device) -> None:
        super().__init__()
        self.monitor = monitor
        self.device = device
        self.violations: list[str] = []
        # Off while timing: a fill inside the call would add device time to the candidate's
        # figure (the timed rounds check outputs by audits instead).
        self.poison_allocations = True

    def reset(self) -> None:
        self.violations = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if self.monitor.in_launch and self.monitor.launch_origin_is_triton(sys._getframe(1)):
            return result
        name = func.overloadpacket.__name__
        if self.poison_allocations and name in POISONED_ALLOCATIONS \
                and isinstance(result, torch.Tensor):
            result.untyped_storage().fill_(POISON_BYTE)
        if name not in ALLOWED_ATEN_OPS:
            self.violations.append(str(func).removeprefix("aten."))
        elif name in DEVICE_CHECKED_OPS:
            tensors = [a for a in (*args, *kwargs.values(), result) if isinstance(a, torch.Tensor)]
            if any(t.device.type != self.device.type for t in tensors):
                self.violations.append(f"{str(func).removeprefix('aten.')} (device transfer)")
        return result


# Rebound by torch itself when torch._dynamo is first imported (it wraps manual_seed), which
# may happen lazily after the snapshot; the harness never calls it.
TORCH_REBINDS_LAZILY: frozenset[str] = frozenset({"torch.manual_seed"})


@dataclass
class IdentitySnapshot:
    """The callables of a set of namespaces, by identity, to catch replacement."""

    entries: dict[str, tuple[Any, dict[str, Any], bool]] = field(default_factory=dict)

    @classmethod
    def take(cls, namespaces: dict[str, Any]) -> IdentitySnapshot:
        snapshot = cls()
        for label, namespace in namespaces.items():
            if namespace is None:
                continue
            is_class = isinstance(namespace, type)
            saved = {k: v for k, v in vars(namespace).items()
                     if (callable(v) or isinstance(v, (staticmethod, classmethod, property)))
                     and f"{label}.{k}" not in TORCH_REBINDS_LAZILY}
            snapshot.entries[label] = (namespace, saved, is_class)
        return snapshot

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
        return found


def harness_namespaces(kernel_type: str) -> dict[str, Any]:
    """What the reference, the stock baselines and the timer rely on."""
    import math
    import time
    import builtins

    import triton
    import triton.testing
    import torch.nn.functional as F
    from triton.runtime import autotuner, jit

    import autokernel.harness.compare as compare_module
    import autokernel.harness.guards as guards_module
    import autokernel.harness.timing as timing_module
    import autokernel.harness.worker as worker_module
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
        "autokernel.harness.timing": timing_module, "autokernel.harness.worker": worker_module,
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
