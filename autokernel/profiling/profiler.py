"""Profile a loaded model's forward with torch.profiler and record it as a `RecordedProfile`.

Measuring: `warmup` forwards first (lazy initialisation, cuBLAS heuristics and allocator growth stay
out of the numbers), then `iters` profiled forwards under `torch.no_grad()`, each followed by a
device synchronisation.

Counting time once. On a GPU only device activity rows are counted: kernels, memcpy and memset. The
CPU op rows that launched them also carry "device time" in torch.profiler's tables, and summing both
doubles the total (RightNow AutoKernel's mistake); GPU-side annotation ranges and profiler overhead
rows are left out for the same reason. On the CPU each op call's self time is one row.

Attribution. Each kernel is tied to the op call that launched it through the profiler's correlation
ids (`linked_correlation_id`), and to the module through annotation ranges: a forward pre-hook on
every submodule opens a `record_function` named after its qualified path and a forward hook closes
it. We install these rather than rely on the profiler's own module information because
`with_modules` only covers TorchScript, and `with_stack`'s "nn.Module: Linear_3" frames carry no
qualified names; annotation ranges nest by time on the CPU thread, work in eager mode on every
device, and cost one small event per module call.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from autokernel.profiling.cpu_record import record_from_cpu, scalar_arguments
from autokernel.profiling.graph import CALL_PREFIX
from autokernel.profiling.events import (
    ModuleCall,
    ModuleInfo,
    OpCall,
    RecordedProfile,
    TimedRow,
    is_op_name,
)
from autokernel.profiling.model_loader import LoadedModel, call_forward
from autokernel.versions import software_versions

SCOPE_PREFIX = "autokernel.module:"
"""Name prefix of the annotation ranges that mark module calls."""

# Activity types (recent torch names them) whose rows are device work worth counting.
DEVICE_WORK_ACTIVITIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
# Profiler bookkeeping that shows up with device time attached (seen on torch 2.11 + H200).
PROFILER_OVERHEAD_NAMES = frozenset({"Activity Buffer Request"})
# Scalar attributes a kernel's parameters can come from (eps of a norm, causal of an attention).
SCALAR_ATTRS = ("eps", "epsilon", "variance_epsilon", "norm_eps", "causal", "is_causal", "scale",
                "approximate")


# ---------------------------------------------------------------------------------------------
# Module scopes


def describe_modules(model: Any) -> dict[str, ModuleInfo]:
    """Class, own parameter shapes and scalar attributes of every submodule, by qualified name."""
    infos: dict[str, ModuleInfo] = {}
    for path, module in model.named_modules():
        cls = type(module)
        params = {
            name: list(p.shape) for name, p in module.named_parameters(recurse=False)
        }
        attrs: dict[str, Any] = {}
        for name in SCALAR_ATTRS:
            value = getattr(module, name, None)
            if isinstance(value, (bool, int, float, str)):
                attrs[name] = value
        infos[path] = ModuleInfo(type=f"{cls.__module__}.{cls.__qualname__}", params=params,
                                 attrs=attrs)
    return infos


@contextlib.contextmanager
def module_scopes(model: Any) -> Iterator[None]:
    """Wrap every submodule's forward in a record_function range named after its path."""
    import torch
    from torch.autograd.profiler import record_function

    handles = []
    # A module may be re-entered (shared blocks), so each one keeps a stack of open ranges.
    open_ranges: dict[int, list[Any]] = {}

    def make_hooks(path: str) -> tuple[Callable[..., None], Callable[..., None]]:
        def pre_hook(module: torch.nn.Module, args: Any) -> None:
            rf = record_function(SCOPE_PREFIX + path)
            rf.__enter__()
            open_ranges.setdefault(id(module), []).append(rf)

        def post_hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            stack = open_ranges.get(id(module))
            if stack:
                stack.pop().__exit__(None, None, None)

        return pre_hook, post_hook

    try:
        for path, module in model.named_modules():
            pre_hook, post_hook = make_hooks(path)
            try:
                pre = module.register_forward_pre_hook(pre_hook)
            except (RuntimeError, TypeError):
                continue  # a module that refuses hooks (TorchScript): its ops go to its parent
            handles.append(pre)
            handles.append(module.register_forward_hook(post_hook))
        yield
    finally:
        for handle in handles:
            handle.remove()
        # A forward that raised leaves ranges open; close them so the profiler is not confused.
        for stack in open_ranges.values():
            while stack:
                stack.pop().__exit__(None, None, None)


# ---------------------------------------------------------------------------------------------
# From torch.profiler events to a RecordedProfile


def _activity(evt: Any) -> str | None:
    value = getattr(evt, "activity_type", None)
    return value if isinstance(value, str) and value else None


def _is_cpu(evt: Any) -> bool:
    return getattr(evt.device_type, "name", str(evt.device_type)).upper().endswith("CPU")


def _is_annotation(evt: Any) -> bool:
    return bool(getattr(evt, "is_user_annotation", False)) or (
        _activity(evt) in ("user_annotation", "gpu_user_annotation")
    ) or evt.name.startswith((SCOPE_PREFIX, CALL_PREFIX))


def _is_op(evt: Any) -> bool:
    """A dispatcher op call (aten::linear, mylib::op), not a runtime call or an annotation."""
    if not _is_cpu(evt) or getattr(evt, "is_async", False) or _is_annotation(evt):
        return False
    activity = _activity(evt)
    if activity is not None and activity != "cpu_op":
        return False
    # A "cpu_op" without a namespace is a range around ops, not one: a custom autograd.Function's
    # forward (named after its class) or a TorchScript function.
    return is_op_name(evt.name) and not evt.name.startswith((SCOPE_PREFIX, CALL_PREFIX))


def _is_device_work(evt: Any, annotation_names: set[str]) -> bool:
    if _is_cpu(evt) or _is_annotation(evt) or evt.name in PROFILER_OVERHEAD_NAMES:
        return False
    activity = _activity(evt)
    if activity is not None:
        return activity in DEVICE_WORK_ACTIVITIES
    # Older torch: no activity type, but GPU-side copies of annotation ranges share their names.
    return evt.name not in annotation_names


def _span(evt: Any) -> tuple[float, float]:
    return float(evt.time_range.start), float(evt.time_range.end)


def record_from_events(
    events: Sequence[Any],
    device: str,
    dtype: str,
    iterations: int,
    modules: dict[str, ModuleInfo] | None = None,
) -> RecordedProfile:
    """Turn torch.profiler FunctionEvents (`prof.events()`, tree built) into a RecordedProfile.

    Takes anything with FunctionEvent's attributes, so the GPU path can be tested with stand-ins.
    """
    cpu_events = [e for e in events if _is_cpu(e) and not getattr(e, "is_async", False)]
    cpu_events.sort(key=lambda e: (_span(e)[0], -_span(e)[1]))

    module_calls: dict[int, ModuleCall] = {}
    ops: dict[int, OpCall] = {}
    op_of_event: dict[int, int] = {}  # id(FunctionEvent) -> OpCall id
    scope_of_event: dict[int, int] = {}  # id(annotation FunctionEvent) -> ModuleCall id
    call_of_event: dict[int, int] = {}  # id(call range FunctionEvent) -> graph node index
    annotation_names: set[str] = set()

    def enclosing(evt: Any) -> tuple[int | None, list[int], int | None]:
        """The innermost enclosing op call, the module calls around it (outermost first) and
        the innermost model call (graph node) whose range holds it."""
        parent_op: int | None = None
        graph_node: int | None = None
        scopes: list[int] = []
        node = getattr(evt, "cpu_parent", None)
        while node is not None:
            if id(node) in scope_of_event:
                scopes.append(scope_of_event[id(node)])
            elif graph_node is None and id(node) in call_of_event:
                graph_node = call_of_event[id(node)]
            elif parent_op is None and id(node) in op_of_event:
                parent_op = op_of_event[id(node)]
            node = getattr(node, "cpu_parent", None)
        scopes.reverse()
        return parent_op, scopes, graph_node

    # Parents start before their children, so one pass in start order sees every parent first.
    for evt in cpu_events:
        if _is_annotation(evt):
            annotation_names.add(evt.name)
            if evt.name.startswith(SCOPE_PREFIX):
                call = ModuleCall(id=len(module_calls) + 1, path=evt.name[len(SCOPE_PREFIX):])
                module_calls[call.id] = call
                scope_of_event[id(evt)] = call.id
            elif evt.name.startswith(CALL_PREFIX):
                call_of_event[id(evt)] = int(evt.name[len(CALL_PREFIX):])
            continue
        if not _is_op(evt):
            continue
        parent, scopes, graph_node = enclosing(evt)
        op = OpCall(
            id=len(ops) + 1,
            name=evt.name,
            parent=parent,
            scopes=scopes,
            shapes=[list(s) for s in (getattr(evt, "input_shapes", None) or [])],
            dtypes=[str(d) for d in (getattr(evt, "input_dtypes", None) or [])],
            args=scalar_arguments(getattr(evt, "concrete_inputs", None)),
            node=graph_node,
        )
        ops[op.id] = op
        op_of_event[id(evt)] = op.id

    rows: list[TimedRow] = []
    if device == "cpu":
        for evt in cpu_events:
            if id(evt) not in op_of_event:
                continue
            start, end = _span(evt)
            children = sum(
                _span(c)[1] - _span(c)[0]
                for c in getattr(evt, "cpu_children", [])
                if id(c) in op_of_event
            )
            self_us = max(0.0, (end - start) - children)
            if self_us > 0:
                rows.append(TimedRow(name=evt.name, time_us=self_us, op=op_of_event[id(evt)]))
        time_source = "cpu op self time"
    else:
        rows = _device_rows(events, cpu_events, op_of_event, annotation_names)
        time_source = "device kernels"

    return RecordedProfile(
        device=device,
        dtype=dtype,
        iterations=iterations,
        rows=rows,
        ops=ops,
        module_calls=module_calls,
        modules=modules or {},
        time_source=time_source,
    )


def _device_rows(
    events: Sequence[Any],
    cpu_events: Sequence[Any],
    op_of_event: dict[int, int],
    annotation_names: set[str],
) -> list[TimedRow]:
    """One row per device kernel/memcpy/memset, tied to the op call that launched it."""
    by_correlation = {e.id: e for e in cpu_events if id(e) in op_of_event}
    # Fallback link for a torch without linked_correlation_id, or when the profiler merged the
    # launching event into its parent: the kernels torch itself attached to each op call.
    attached: dict[tuple[str, float], list[int]] = {}
    for evt in cpu_events:
        if id(evt) in op_of_event:
            for kernel in getattr(evt, "kernels", []) or []:
                key = (kernel.name, round(float(kernel.duration), 3))
                attached.setdefault(key, []).append(op_of_event[id(evt)])

    rows: list[TimedRow] = []
    for evt in events:
        if not _is_device_work(evt, annotation_names):
            continue
        start, end = _span(evt)
        duration = end - start
        op: int | None = None
        launcher = by_correlation.get(getattr(evt, "linked_correlation_id", 0) or -1)
        if launcher is not None:
            op = op_of_event[id(launcher)]
        else:
            candidates = attached.get((evt.name, round(duration, 3)))
            if candidates:
                op = candidates.pop(0)
        rows.append(TimedRow(name=evt.name, time_us=duration, op=op))
    return rows


# ---------------------------------------------------------------------------------------------
# Running the profiler


# Kineto (torch 2.11) writes "USDT:... profiler_start/stop" lines straight to file descriptor 2 when
# a profile starts and stops, at every log level; users saw them glued to the spinner.
NATIVE_PROFILER_CHATTER = ("USDT:", "STAGE:")


@contextlib.contextmanager
def without_profiler_chatter() -> Iterator[None]:
    """Run the block with fd 2 in a temporary file, then pass on every line but kineto's."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().decode(errors="replace").splitlines(True)
                    if not line.startswith(NATIVE_PROFILER_CHATTER)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


# A forward slower than this is not repeated for warm-up or profiled again: a recurrent model's
# CPU forward runs tens of thousands of ops, and each profiled one costs seconds to parse.
SLOW_FORWARD_S = 0.5


def profile_model(
    loaded: LoadedModel,
    warmup: int = 3,
    iters: int = 5,
    trace_path: str | Path | None = None,
    record_graph: bool = True,
    progress: Callable[[str], None] | None = None,
) -> RecordedProfile:
    """Warm up, profile `iters` forwards, and record every kernel with its op and module, and
    the first profiled forward's data-flow graph (`recorder.py`).

    A forward that takes longer than SLOW_FORWARD_S is not warmed up again (the loader ran one,
    else one warm-up runs) and is profiled once: its timings are long enough to be stable, and the profiler's
    events of a forward of tens of thousands of ops take seconds to read. `record.iterations`
    and `record.warmup` say how many ran. `progress(what)` hears what it is doing, now and then
    (the CLI shows it on a terminal).
    """
    import time

    import torch
    # torch.autograd.profiler, not torch.profiler: the latter imports torch._inductor on start
    # (seconds), only to read a CUDA-graph setting.
    from torch.autograd.profiler import profile

    from autokernel.profiling.recorder import GraphRecorder

    device = loaded.device
    model = loaded.model

    def tell(what: str) -> None:
        if progress is not None:
            progress(what)

    def reading(done: int, total: int) -> None:
        tell(f"reading the profile: {done:,} of {total:,} events")

    def forward() -> float:
        start = time.perf_counter()
        call_forward(model, loaded.inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    recorder = GraphRecorder(model, loaded.inputs) if record_graph else None
    warmed = 0
    profiled = 0
    with torch.no_grad():
        # The loader's check forward warmed the model up already, if it was a slow one.
        slow = loaded.forward_seconds is not None and loaded.forward_seconds > SLOW_FORWARD_S
        while warmed < warmup and not slow:
            warmed += 1
            tell(f"warm-up forward {warmed} of {warmup}")
            if forward() > SLOW_FORWARD_S:
                break
        with module_scopes(model):
            # One start and stop; its events are read only when asked for (function_events),
            # which a CPU profile never does.
            prof = profile(use_cpu=True, use_device="cuda" if device == "cuda" else None,
                           record_shapes=True, use_kineto=True)
            # Only the start and the stop are muted: the model's own warnings stay live.
            with without_profiler_chatter():
                prof.__enter__()
            try:
                while profiled < iters:
                    tell(f"profiled forward {profiled + 1} of {iters}")
                    scope = (recorder.forward(record=profiled == 0) if recorder is not None
                             else contextlib.nullcontext())
                    with scope:
                        seconds = forward()
                    profiled += 1
                    if seconds > SLOW_FORWARD_S:
                        break
            finally:
                with without_profiler_chatter():
                    prof.__exit__(None, None, None)
    if trace_path is not None:
        prof.export_chrome_trace(str(trace_path))

    # On the CPU every event is a CPU one, which we read faster than torch (cpu_record.py); a
    # GPU profile needs torch's device-kernel links.
    if device == "cpu":
        record = record_from_cpu(prof.kineto_results, dtype=loaded.dtype_name,
                                 iterations=profiled, modules=describe_modules(model),
                                 scope_prefix=SCOPE_PREFIX, progress=reading)
    else:
        tell("reading the profile")
        record = record_from_events(prof.function_events, device=device,
                                    dtype=loaded.dtype_name, iterations=profiled,
                                    modules=describe_modules(model))
    record.warmup = warmed
    record.graph = recorder.finish() if recorder is not None else None
    record.versions = software_versions()
    if device == "cuda":
        record.gpu = torch.cuda.get_device_name()
    return record
