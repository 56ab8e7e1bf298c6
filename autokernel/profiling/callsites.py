"""What the classifier's rules read: the profile indexed by op (`Context`), the call sites they
name (`SiteKey`), and the unclaimed ops a multi-op pattern may take (`significant_unclaimed`,
`unclaimed_span`). The small readers of one recorded op call are in `site_readers.py`.

The per-kernel-type rules that use them are in each op entry's `aten_ops` (one aten op) and
`patterns` (several ops) (`autokernel/ops/<type>.py`); `op_rules.py` and `patterns.py` gather
them, in the order `patterns.PATTERN_ORDER` states, and `classify.py` runs them over a profile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from autokernel.profiling.events import OpCall, RecordedProfile

OTHER = "other"

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


def significant_unclaimed(ctx: Context) -> list[OpCall]:
    return [op for op in ctx.roots if ctx.significant(op) and op.id not in ctx.claims]


def unclaimed_span(ctx: Context, first: OpCall, last: OpCall) -> list[OpCall]:
    """Every unclaimed root op from first to last, views in between included."""
    between = ctx.roots[ctx.position[first.id]:ctx.position[last.id] + 1]
    return [op for op in between if op.id not in ctx.claims]
