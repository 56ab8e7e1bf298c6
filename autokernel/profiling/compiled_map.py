"""Which plan target each unit of a torch.compile'd forward's time belongs to: `compiled_times`.

Inductor names the kernels it generates after the aten ops fused into them
(`triton_red_fused_add_mean_mul_pow_rsqrt_0` on a GPU, `cpp_fused__softmax_1` on the CPU, with
`triton.descriptive_names = "original_aten"`, its default), and leaves GEMMs and SDPA to extern
kernels, which the profile shows as the aten ops that launched them (aten::addmm,
aten::_scaled_dot_product_flash_attention). So each compiled row names a set of aten ops, and
the eager profile says how much time each target spent in each of them:

1. a fused kernel's name is cut into aten op names (the longest known name first: `var_mean` is
   one op, not a var and a mean); any other row's names are its op and the ops around it;
2. its time goes to the targets (and "other") in proportion to the eager time each spent in the
   row's characteristic ops (any op around the eager row: a `native_layer_norm` inside
   `layer_norm`), or, when it has none (only the elementwise arithmetic, views and copies that
   every op has: GENERIC_OPS), in those ops called by the model itself (a residual add, a
   rotation's cat; not the transpose inside a linear);
3. a row whose ops the eager profile never ran goes to the targets of the kernel type whose
   aten-op table (`OpSpec.aten_ops`) names one of them, else by kernel name
   (`classify_kernel_name`: an extern GEMM with no op), else to "other".

A fused kernel holding a norm and the residual add before it is charged to the norm's target as
much as the eager profile charged the add to it; that is an estimate, and the plan says it is
the compiled share of the target's *ops*.

Plain Python on recorded profiles, like the classifier.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from autokernel.profiling.callsites import OTHER, Attribution
from autokernel.profiling.events import FUSED_KERNEL, RecordedProfile, TimedRow, is_op_name
from autokernel.profiling.op_rules import classify_kernel_name, op_rules
from autokernel.profiling.plan import Plan


# Ops every written-out op has: they say nothing of which target a fused kernel serves.
GENERIC_OPS = frozenset({
    "add", "sub", "rsub", "mul", "div", "neg", "reciprocal", "to_copy", "_to_copy", "to", "copy",
    "copy_", "clone", "view", "_unsafe_view", "reshape", "expand", "permute", "transpose", "t",
    "unsqueeze", "squeeze", "slice", "select", "cat", "stack", "contiguous", "as_strided",
    "detach", "alias", "lift_fresh", "fill", "fill_", "full", "zeros", "ones", "empty",
    "empty_strided", "where", "masked_fill", "convert_element_type", "type_as", "split",
    "split_with_sizes", "chunk", "index", "gather", "scalar_tensor", "lt", "gt", "le", "ge",
    "eq", "ne", "logical_not", "bitwise_not", "arange", "iota", "flatten", "unbind",
})

TargetKey = tuple[str, str]  # (kernel type, role); (OTHER, "") for "other"
OTHER_KEY: TargetKey = (OTHER, "")


def _bare(name: str) -> str:
    return name.split("::", 1)[1] if "::" in name else name


def _stack_names(record: RecordedProfile, op_id: int | None) -> list[str]:
    """The names of the op that ran a row and of every op around it, innermost first."""
    names = []
    while op_id is not None and op_id in record.ops:
        op = record.ops[op_id]
        names.append(_bare(op.name))
        op_id = op.parent
    return names


def fused_ops(kernel: str, vocabulary: Iterable[str]) -> list[str] | None:
    """The aten op names in an Inductor kernel's name, or None for a name Inductor did not make."""
    found = FUSED_KERNEL.match(kernel)
    if found is None:
        return None
    known = set(vocabulary)
    tokens = found.group("ops").split("_")
    longest = max((name.count("_") + 1 for name in known), default=1)
    names: list[str] = []
    i = 0
    while i < len(tokens):
        for j in range(min(len(tokens), i + longest), i, -1):
            candidate = "_".join(tokens[i:j])
            if candidate in known:
                names.append(candidate)
                i = j
                break
        else:
            if tokens[i]:
                names.append(tokens[i])
            i += 1
    return names


OpTimes = dict[TargetKey, dict[str, float]]


@dataclass
class EagerOpTimes:
    """Per target (and "other"), the eager time of its rows by op name: `around` by each op
    around a row, `called` by the outermost one (the op the model's code called)."""

    around: OpTimes
    called: OpTimes


def eager_op_times(plan: Plan, record: RecordedProfile,
                   attributions: Sequence[Attribution]) -> EagerOpTimes:
    """Each target's (and "other"'s) eager time by op name."""
    known = {(t.kernel_type, t.role) for t in plan.targets}
    largest = {}
    for target in plan.targets:  # most time first: a type's first target is its largest
        largest.setdefault(target.kernel_type, (target.kernel_type, target.role))
    around: OpTimes = defaultdict(lambda: defaultdict(float))
    called: OpTimes = defaultdict(lambda: defaultdict(float))
    for row, attribution in zip(record.rows, attributions):
        key: TargetKey = OTHER_KEY
        if attribution.kernel_type != OTHER and attribution.site is not None:
            key = (attribution.kernel_type, attribution.site.role)
            if key not in known:  # a roleless GEMM kernel joined its type's largest target
                key = largest.get(attribution.kernel_type, OTHER_KEY)
        names = _stack_names(record, row.op)
        for name in dict.fromkeys(names):
            around[key][name] += row.time_us
        if names:
            called[key][names[-1]] += row.time_us
    return EagerOpTimes(around, called)


def _split(names: Iterable[str], times: OpTimes) -> dict[TargetKey, float]:
    weights = {key: sum(by_name.get(n, 0.0) for n in names) for key, by_name in times.items()}
    return {key: w for key, w in weights.items() if w > 0}


def _by_type(names: Iterable[str], kernel_type: str | None, plan: Plan) -> dict[TargetKey, float]:
    """Weights for a row the eager profile never ran: the targets of the kernel type an aten-op
    table or the kernel's name points to, by their eager time."""
    rules = op_rules()
    types = {rules[f"aten::{n}"].kernel_type for n in names if f"aten::{n}" in rules}
    if kernel_type is not None:
        types.add(kernel_type)
    return {(t.kernel_type, t.role): t.time_ms for t in plan.targets
            if t.kernel_type in types and t.time_ms > 0}


def row_weights(row: TimedRow, record: RecordedProfile, plan: Plan, times: EagerOpTimes,
                vocabulary: set[str]) -> dict[TargetKey, float]:
    """How one compiled row's time splits over the targets and "other" (unnormalized)."""
    names = fused_ops(row.name, vocabulary)
    kernel_type = None
    if names is None:
        names = _stack_names(record, row.op) if row.op is not None else []
        kernel_type = classify_kernel_name(row.name) if row.op is None else None
    characteristic = [n for n in names if n not in GENERIC_OPS]
    weights = _split(characteristic, times.around) if characteristic else {}
    if not weights:
        weights = _split(names, times.called)
    if not weights:
        weights = _by_type(names, kernel_type, plan)
    return weights or {OTHER_KEY: 1.0}


def counted_rows(record: RecordedProfile) -> list[TimedRow]:
    """The compiled forward's rows that are work: device kernels on a GPU; on the CPU the aten
    ops and Inductor's kernels, not the compiled region's own bookkeeping ranges (Dynamo's
    cache lookup, the AOT wrapper), which the eager profile has no counterpart of."""
    if record.device != "cpu":
        return list(record.rows)
    return [r for r in record.rows if is_op_name(r.name)]


def compiled_times(plan: Plan, eager: RecordedProfile, attributions: Sequence[Attribution],
                   compiled: RecordedProfile) -> tuple[dict[TargetKey, float], float]:
    """(µs per target key and for OTHER_KEY, total µs) of the compiled profile, summed over its
    iterations."""
    times = eager_op_times(plan, eager, attributions)
    vocabulary = {name for by_name in times.around.values() for name in by_name}
    vocabulary |= {_bare(name) for name in op_rules()} | GENERIC_OPS
    shares: dict[TargetKey, float] = defaultdict(float)
    total = 0.0
    for row in counted_rows(compiled):
        weights = row_weights(row, compiled, plan, times, vocabulary)
        whole = sum(weights.values())
        for key, weight in weights.items():
            shares[key] += row.time_us * weight / whole
        total += row.time_us
    return dict(shares), total
