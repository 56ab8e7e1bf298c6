"""A CPU profile's events read straight from the profiler's results, in one pass: `record_from_cpu`.

What `profiler.record_from_events` makes of torch's FunctionEvents, without them: torch builds
those in Python at ~200 µs an event (28 s for the 135k ops of a recurrent model's forward), and
the generic reader then walks every op's parents again. Here each event is visited once, in start
order, with a stack per thread that carries what its children inherit (the enclosing op call, the
module calls around it, the innermost model call), so an op costs a few µs.
`tests/test_profile_speed.py` holds the two readers equal on the same profile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autokernel.profiling.events import (ModuleCall, ModuleInfo, OpCall, RecordedProfile, TimedRow,
                                         collection_paused, is_op_name)
from autokernel.profiling.graph import CALL_PREFIX

SCALARS = (bool, int, float, str, type(None))
# What concrete_inputs holds for nearly every op: scalars, and lists of them (a size, dims).
SCALAR_TYPES = frozenset(SCALARS)


def _jsonable(value: Any) -> Any:
    if isinstance(value, SCALARS):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def scalar_arguments(concrete_inputs: Any) -> list[Any]:
    """The op's scalar inputs as JSON-able values (None for a tensor input)."""
    values = list(concrete_inputs or ())
    for value in values:
        kind = type(value)
        if kind not in SCALAR_TYPES and (kind is not list or
                                         not all(type(v) in SCALAR_TYPES for v in value)):
            break
    else:
        return values
    return [_jsonable(v) for v in values]


class _Frame:
    """An open event on a thread's stack, and what the events inside it inherit."""

    __slots__ = ("end", "op", "scopes", "node", "row", "child_ns")

    def __init__(self, end: int, op: int | None, scopes: tuple[int, ...], node: int | None,
                 row: int | None) -> None:
        self.end = end
        self.op = op  # the innermost op call, this one or an enclosing one
        self.scopes = scopes  # module call ids, outermost first
        self.node = node  # the innermost model call's graph node
        self.row = row  # this op's index in the rows, None for a range
        self.child_ns = 0  # time of the ops directly inside this op


def record_from_cpu(results: Any, dtype: str, iterations: int,
                    modules: Mapping[str, ModuleInfo] | None = None, scope_prefix: str = "",
                    progress: Callable[[int, int], None] | None = None) -> RecordedProfile:
    """The RecordedProfile of a finished CPU profile (`prof.kineto_results`): every op call with its
    parent, module calls and graph node, and one row per op call with its self time (its time
    less that of the op calls directly inside it). `scope_prefix` names the module-call ranges
    (`profiler.SCOPE_PREFIX`); `progress(done, total)` is called now and then."""
    from operator import itemgetter

    with collection_paused():
        return _read(results, dtype, iterations, modules, scope_prefix, progress,
                     itemgetter(0, 1))


ANNOTATIONS = ("user_annotation", "gpu_user_annotation")


def _read(results: Any, dtype: str, iterations: int,
          modules: Mapping[str, ModuleInfo] | None, scope_prefix: str,
          progress: Callable[[int, int], None] | None, start_order: Any) -> RecordedProfile:
    # Each accessor is a C++ call of ~1 µs, and a recurrent forward has 100k+ events: a CPU-only
    # profile needs no device check, and only async ranges end on another thread.
    raw_events = []
    for raw in results.events():
        if raw.is_async():
            continue
        name = raw.name()
        if name.startswith("["):
            continue  # memory records ("[memory]")
        raw_events.append((raw.start_ns(), -raw.end_ns(), raw.start_thread_id(), name, raw))
    raw_events.sort(key=start_order)

    ops: dict[int, OpCall] = {}
    module_calls: dict[int, ModuleCall] = {}
    rows: list[TimedRow | None] = []
    row_ns: list[int] = []
    stacks: dict[int, list[_Frame]] = {}
    root = _Frame(0, None, (), None, None)
    total = len(raw_events)
    prefixes = (scope_prefix, CALL_PREFIX) if scope_prefix else (CALL_PREFIX,)

    def close(frame: _Frame) -> None:
        if frame.row is not None:
            self_ns = row_ns[frame.row] - frame.child_ns
            if self_ns > 0:
                rows[frame.row].time_us = self_ns / 1000  # type: ignore[union-attr]
            else:
                rows[frame.row] = None

    for index, (start, negative_end, thread, name, raw) in enumerate(raw_events):
        if progress is not None and not index % 20000:
            progress(index, total)
        end = -negative_end
        stack = stacks.get(thread)
        if stack is None:
            stack = stacks[thread] = []
        while stack and stack[-1].end <= start:
            close(stack.pop())
        # An event that overlaps the open one without fitting inside it has no parent.
        parent = stack[-1] if stack and end <= stack[-1].end else root
        activity = raw.activity_type()  # "user_annotation" for a record_function range
        if activity in ANNOTATIONS or name.startswith(prefixes):
            if scope_prefix and name.startswith(scope_prefix):
                call = ModuleCall(id=len(module_calls) + 1, path=name[len(scope_prefix):])
                module_calls[call.id] = call
                frame = _Frame(end, parent.op, parent.scopes + (call.id,), parent.node, None)
            elif name.startswith(CALL_PREFIX):
                frame = _Frame(end, parent.op, parent.scopes, int(name[len(CALL_PREFIX):]), None)
            else:
                frame = _Frame(end, parent.op, parent.scopes, parent.node, None)
            stack.append(frame)
            continue
        if (activity and activity != "cpu_op") or not is_op_name(name):
            # Neither an op nor an annotation: a range its children see through (a custom
            # autograd.Function's forward, named after its class, runs its ops inside one).
            stack.append(_Frame(end, parent.op, parent.scopes, parent.node, None))
            continue
        op = OpCall(id=len(ops) + 1, name=name, parent=parent.op, scopes=list(parent.scopes),
                    shapes=raw.shapes(), dtypes=raw.dtypes(),
                    args=scalar_arguments(raw.concrete_inputs()), node=parent.node)
        ops[op.id] = op
        if parent.row is not None:
            parent.child_ns += end - start
        rows.append(TimedRow(name=name, time_us=0.0, op=op.id))
        row_ns.append(end - start)
        stack.append(_Frame(end, op.id, parent.scopes, parent.node, len(rows) - 1))
    for stack in stacks.values():
        while stack:
            close(stack.pop())
    return RecordedProfile(
        device="cpu",
        dtype=dtype,
        iterations=iterations,
        rows=[row for row in rows if row is not None],
        ops=ops,
        module_calls=module_calls,
        modules=dict(modules or {}),
        time_source="cpu op self time",
    )
