"""What the classifier's rules read: the profile indexed by op (`Context`), the call sites they
name (`SiteKey`), and small readers of a recorded op call's shapes and arguments.

The per-kernel-type rules that use them are in each op entry's `aten_ops` (one aten op) and
`patterns` (several ops) (`autokernel/ops/<type>.py`); `op_rules.py` and `patterns.py` gather
them, in the order `patterns.PATTERN_ORDER` states, and `classify.py` runs them over a profile.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from autokernel.profiling.events import OpCall, RecordedProfile

OTHER = "other"

PROFILER_DTYPES = {
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "float": "fp32",
    "double": "fp64",
}
# torch.finfo(dtype).eps: what nn.RMSNorm / F.rms_norm use when eps is None.
FINFO_EPS = {"fp16": 0.0009765625, "bf16": 0.0078125, "fp32": 1.1920928955078125e-07,
             "fp64": 2.220446049250313e-16}

# Ops that move no data (views, allocation, no-op dropout): skipped when matching op sequences.
TRANSPARENT_OPS = frozenset({
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::view_as",
    "aten::transpose", "aten::t", "aten::permute", "aten::expand", "aten::expand_as",
    "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::as_strided",
    "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind", "aten::narrow",
    "aten::flatten", "aten::unflatten", "aten::movedim", "aten::detach", "aten::alias",
    "aten::lift_fresh", "aten::dropout", "aten::feature_dropout", "aten::empty",
    "aten::empty_like", "aten::empty_strided", "aten::resolve_conj", "aten::resolve_neg",
})
CAST_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::type_as"})


MATMUL_ROLES = ("linear", "batched", "gemm")


@dataclass(frozen=True)
class SiteKey:
    """Where and how a kernel type is called: one CallSite of the plan."""

    module: str
    aten_op: str
    shape: tuple[int, ...]  # registry dims; () when the profile did not record shapes
    dtype: str
    params: tuple[tuple[str, Any], ...] = ()  # what the op's input generator takes (eps, causal)
    notes: tuple[tuple[str, Any], ...] = ()  # what else differs from the reference (a bias)
    role: str = ""  # for matmul, one of MATMUL_ROLES: each role is a target of its own


@dataclass
class Attribution:
    """One timed row, classified."""

    kernel_type: str  # one of KERNEL_TYPES, or "other"
    time_us: float
    call: tuple[str, int]  # identifies the call this row is part of, for call counts
    site: SiteKey | None  # None for "other"
    label: str  # the op (or kernel) name a person would recognise


# ---------------------------------------------------------------------------------------------
# Registry dims and parameters


@lru_cache(maxsize=None)
def registry_dims(kernel_type: str) -> tuple[str, ...]:
    """The op's registry dims (OpSpec.dims): the names a call site's shape is given in."""
    from autokernel.ops import get_spec

    return tuple(get_spec(kernel_type).dims)


# make_inputs(shape, dtype, device, generator, distribution, ...): the arguments every op takes.
INPUT_MAKER_ARGUMENTS = 5


@lru_cache(maxsize=None)
def input_parameters(kernel_type: str) -> frozenset[str]:
    """What a call site's params may name: the reference's arguments (eps, causal, scale) and
    the op's input generator's own named options (matmul's b_transposed, a layout).

    Everything else the profiler learns about a call site (a linear's bias, a mask) is a note:
    the harness feeds params to the op's input generator, which takes exactly these.
    """
    import inspect

    from autokernel.ops import get_spec

    spec = get_spec(kernel_type)
    names = set(inspect.signature(spec.reference).parameters)
    maker = inspect.signature(spec.make_inputs).parameters.values()
    names |= {p.name for p in list(maker)[INPUT_MAKER_ARGUMENTS:]
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return frozenset(names)


@lru_cache(maxsize=None)
def axis_dim(kernel_type: str) -> str | None:
    """The op's optional inner-size dim (OpSpec.axis_dim): K of an (M, N, K) call over dim 1."""
    from autokernel.ops import get_spec

    return get_spec(kernel_type).axis_dim


def to_registry_shape(kernel_type: str, named: dict[str, int]) -> tuple[int, ...]:
    shape = tuple(int(named[d]) for d in registry_dims(kernel_type))
    inner = axis_dim(kernel_type)
    if inner is not None and int(named.get(inner, 1)) > 1:  # K = 1 is over the last dim
        shape += (int(named[inner]),)
    return shape


# ---------------------------------------------------------------------------------------------
# Small helpers


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def _shape(op: OpCall, index: int) -> list[int]:
    return list(op.shapes[index]) if index < len(op.shapes) else []


def _arg(op: OpCall, index: int) -> Any:
    return op.args[index] if index < len(op.args) else None


def _has_tensor(op: OpCall, index: int) -> bool:
    return bool(_shape(op, index))


def _dtype(op: OpCall, default: str) -> str:
    for name in op.dtypes:
        if name in PROFILER_DTYPES:
            return PROFILER_DTYPES[name]
    return default


def _rows_and_cols(x: Sequence[int], dim: Any = -1) -> tuple[int, int] | None:
    if not x:
        return None
    d = dim if isinstance(dim, int) else -1
    if not -len(x) <= d < len(x):
        return None
    n = x[d]
    return (_numel(x) // n if n else 0), n


def _single_axis(dim: Any, ndim: int) -> int | None:
    """The one dim an op's `dim` argument names, made non-negative; None for none or several."""
    if isinstance(dim, list) and len(dim) == 1:
        dim = dim[0]
    if not isinstance(dim, int) or isinstance(dim, bool) or not -ndim <= dim < ndim:
        return None
    return dim % ndim


def _over_axis(x: Sequence[int], axis: int) -> tuple[dict[str, int], dict[str, Any]]:
    """Registry dims and params of a row-wise op over dim `axis` of x: (M, N) over the last dim,
    else M = the dims before, N = the axis, K = the dims after it, and the plan's `axis`."""
    named = {"M": _numel(x[:axis]), "N": x[axis]}
    if axis == len(x) - 1:
        return named, {}
    return {**named, "K": _numel(x[axis + 1:])}, {"axis": axis}


def _maybe_last_dim(dim: Any, ndim: int) -> bool:
    """The last dim, or not recorded (a torch that keeps no scalar-list arguments)."""
    return dim is None or _is_last_dim(dim, ndim)


def _is_last_dim(dim: Any, ndim: int) -> bool:
    if isinstance(dim, list) and len(dim) == 1:
        dim = dim[0]
    return isinstance(dim, int) and dim in (-1, ndim - 1)


def _norm_width(op: OpCall) -> int | None:
    """The normalized width of a layer_norm / rms_norm call: its normalized_shape, else its
    weight's size, else x's last dim (argument layouts the two norms share)."""
    normalized = _arg(op, 1)
    if isinstance(normalized, list) and normalized and all(isinstance(d, int) for d in normalized):
        return _numel(normalized)
    weight = _shape(op, 2)
    if weight:
        return _numel(weight)
    x = _shape(op, 0)
    return x[-1] if x else None


def _broadcast_numel(a: Sequence[int], b: Sequence[int]) -> int:
    """Elements of the shape a and b broadcast to (torch.matmul's batch)."""
    ndim = max(len(a), len(b))
    a = [1] * (ndim - len(a)) + list(a)
    b = [1] * (ndim - len(b)) + list(b)
    return _numel([x if y == 1 else y for x, y in zip(a, b)])


def _four_dims(x: Sequence[int]) -> dict[str, int]:
    """[B, H, S, D] from a 4-D tensor; fewer dims get leading ones ([H, S, D] → B = 1)."""
    padded = [1] * (4 - len(x)) + list(x[-4:]) if len(x) < 4 else list(x)
    b = _numel(padded[:-3])
    return {"B": b, "H": padded[-3], "S": padded[-2], "D": padded[-1]}


Extracted = tuple[dict[str, int], dict[str, Any]] | None
Extractor = Callable[[OpCall, "Context"], Extracted]


# ---------------------------------------------------------------------------------------------
# The profile, indexed


@dataclass
class Claim:
    """A pattern's verdict on a root op call: part of call `call` of `kernel_type` at `site`;
    for "other" (part of an op no pattern recognized), `site` is None and `label` says what."""

    kernel_type: str
    call: tuple[str, int]
    site: SiteKey | None
    label: str = ""


@dataclass
class Context:
    record: RecordedProfile
    roots: list[OpCall] = field(default_factory=list)  # op calls made by Python code, in order
    root_of: dict[int, int] = field(default_factory=dict)  # op id → its root op id
    timed_roots: set[int] = field(default_factory=set)  # root ops with measured time under them
    claims: dict[int, Claim] = field(default_factory=dict)  # root op id → claim
    position: dict[int, int] = field(default_factory=dict)  # root op id → index in roots
    in_scope: dict[int, list[OpCall]] = field(default_factory=dict)  # module call → root ops
    children: dict[int, list[OpCall]] = field(default_factory=dict)  # op id → its ops, in order

    @classmethod
    def build(cls, record: RecordedProfile) -> Context:
        ctx = cls(record)
        for op in sorted(record.ops.values(), key=lambda o: o.id):
            root = op.id
            parent = op.parent
            while parent is not None and parent in record.ops:
                root = parent
                parent = record.ops[parent].parent
            ctx.root_of[op.id] = root
            if op.parent is not None:
                ctx.children.setdefault(op.parent, []).append(op)
            if root == op.id:
                ctx.position[op.id] = len(ctx.roots)
                ctx.roots.append(op)
                for scope in op.scopes:
                    ctx.in_scope.setdefault(scope, []).append(op)
        for row in record.rows:
            if row.op is not None and row.op in ctx.root_of and row.time_us > 0:
                ctx.timed_roots.add(ctx.root_of[row.op])
        return ctx

    def significant(self, op: OpCall) -> bool:
        """Does this root op do work that a pattern must account for?"""
        if op.name in TRANSPARENT_OPS:
            return False
        # On a GPU an op that launched nothing (a view the list above misses) moves no data.
        return self.record.device == "cpu" or op.id in self.timed_roots

    def module_path(self, op: OpCall) -> str:
        if not op.scopes:
            return ""
        call = self.record.module_calls.get(op.scopes[-1])
        return call.path if call else ""

    def common_module(self, ops: Sequence[OpCall]) -> str:
        common = list(ops[0].scopes)
        for op in ops[1:]:
            n = 0
            while n < min(len(common), len(op.scopes)) and common[n] == op.scopes[n]:
                n += 1
            common = common[:n]
        if not common:
            return ""
        call = self.record.module_calls.get(common[-1])
        return call.path if call else ""

    def module_attr(self, op: OpCall, names: Sequence[str]) -> Any:
        """The first of `names` set on the innermost profiled module around `op`, or None: a
        module-level setting (eps, GELU's approximation) the op's recorded arguments lack."""
        for scope in reversed(op.scopes):
            call = self.record.module_calls.get(scope)
            info = self.record.modules.get(call.path) if call else None
            if info is None:
                continue
            return next((info.attrs[n] for n in names if info.attrs.get(n) is not None), None)
        return None

    def module_eps(self, op: OpCall) -> float | None:
        value = self.module_attr(op, ("eps", "variance_epsilon", "epsilon", "norm_eps"))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return None

    def site(self, kernel_type: str, module: str, aten_op: str, named: dict[str, int] | None,
             params: dict[str, Any], dtype: str, role: str = "") -> SiteKey:
        shape = to_registry_shape(kernel_type, named) if named else ()
        arguments = input_parameters(kernel_type)
        kernel_params = {k: v for k, v in params.items() if k in arguments}
        notes = {k: v for k, v in params.items() if k not in arguments}
        return SiteKey(module, aten_op, shape, dtype, tuple(sorted(kernel_params.items())),
                       tuple(sorted(notes.items())), role)

    def claim(self, ops: Sequence[OpCall], kernel_type: str, call: tuple[str, int],
              site: SiteKey) -> None:
        for op in ops:
            self.claims[op.id] = Claim(kernel_type, call, site)

    def label_other(self, ops: Sequence[OpCall], label: str) -> None:
        """The ops are "other" under `label`, whatever a single-op rule would make of them."""
        for op in ops:
            self.claims[op.id] = Claim(OTHER, ("op", op.id), None, label)


# ---------------------------------------------------------------------------------------------
# Multi-op patterns


def _significant_unclaimed(ctx: Context) -> list[OpCall]:
    return [op for op in ctx.roots if ctx.significant(op) and op.id not in ctx.claims]


def _span(ctx: Context, first: OpCall, last: OpCall) -> list[OpCall]:
    """Every unclaimed root op from first to last, views in between included."""
    between = ctx.roots[ctx.position[first.id]:ctx.position[last.id] + 1]
    return [op for op in between if op.id not in ctx.claims]
