"""Matching the recorded data-flow graph by what it computes: `GraphContext` and its helpers.

Each kernel type's graph patterns (`OpSpec.graph_patterns`, run in
`patterns.GRAPH_PATTERN_ORDER`) follow producer → consumer edges from an anchor (a softmax, a
reduction, an erf) and claim the calls of one op as ONE call of the type, with its site. A claim
covers the profiler's ops of those calls in every profiled forward (`OpCall.node`), so the rest
of the classifier (`classify.py`) reads it like a claim of the op-sequence patterns.

What the helpers here make equal, so that the patterns need not know every spelling:
- views, casts and copies are looked through (`base`): `x.float()`, `x.view(..)`,
  `.contiguous()`, `.to(dtype)`, a no-op dropout;
- a value's spelling is canonicalized by `canonical.py` (`x * x` is a square, `x *
  sigmoid(x)` a SiLU, `max(dim).values` an amax).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autokernel.profiling.callsites import Context, SiteKey
from autokernel.profiling.events import OpCall
from autokernel.profiling.graph import (
    Graph, GraphNode, GraphValue, argument, tensor_inputs, value_id,
)

# Calls that move or relabel data without computing: the value after one is the value before.
VIEWS = frozenset({
    "view", "reshape", "view_as", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze",
    "expand", "expand_as", "contiguous", "clone", "detach", "dropout", "alias", "T", "mT",
    "transpose", "permute", "movedim", "t", "data",
})
CASTS = frozenset({"float", "half", "bfloat16", "double", "to", "type", "type_as"})
TRANSPARENT = VIEWS | CASTS


@dataclass
class GraphContext:
    """The graph with the profile's op index, and the claims made so far."""

    graph: Graph
    ctx: Context
    claimed: set[int] = field(default_factory=set)  # node positions
    # node position -> its root ops, one list per profiled forward
    ops_of: dict[int, list[list[OpCall]]] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)  # id(node) -> list position

    @classmethod
    def build(cls, graph: Graph, ctx: Context) -> GraphContext:
        gctx = cls(graph, ctx)
        gctx.positions = {id(node): i for i, node in enumerate(graph.nodes)}
        position = {node.index: i for i, node in enumerate(graph.nodes)}
        forwards: dict[int, dict[int, list[OpCall]]] = {}
        for op in ctx.roots:
            if op.node is None or not op.scopes or op.node not in position:
                continue
            forwards.setdefault(op.scopes[0], {}).setdefault(position[op.node], []).append(op)
        for forward in forwards.values():
            for node, ops in forward.items():
                gctx.ops_of.setdefault(node, []).append(ops)
        return gctx

    # -- reading values ------------------------------------------------------------------------

    def node(self, position: int) -> GraphNode:
        return self.graph.nodes[position]

    def value(self, value: int | None) -> GraphValue | None:
        return self.graph.value(value)

    def shape(self, value: int | None) -> list[int]:
        found = self.graph.value(value)
        return list(found.shape) if found else []

    def producer(self, value: int | None) -> GraphNode | None:
        return self.graph.producer(value)

    def base(self, value: int | None, through: frozenset[str] = TRANSPARENT) -> int | None:
        """The value before any view, cast or copy of it."""
        seen = 0
        while value is not None and seen < 64:
            node = self.graph.producer(value)
            if node is None or node.op not in through or not node.args:
                return value
            source = value_id(node.args[0])
            if source is None:
                return value
            value = source
            seen += 1
        return value

    def made_by(self, value: int | None, *ops: str) -> GraphNode | None:
        """The call that computed `value` (looking through views and casts) if it is one of
        `ops`, else None."""
        node = self.graph.producer(self.base(value))
        return node if node is not None and node.op in ops else None

    def users(self, value: int | None) -> list[GraphNode]:
        """The calls that read `value` or a view or cast of it, looked through."""
        found: list[GraphNode] = []
        pending = [value]
        seen: set[int] = set()
        while pending:
            current = pending.pop()
            if current is None or current in seen:
                continue
            seen.add(current)
            for user in self.graph.users(current):
                if user.op in TRANSPARENT and value_id(user.args[0] if user.args else None) \
                        == current:
                    pending.extend(user.outputs)
                else:
                    found.append(user)
        return found

    def between(self, start: int | None, end: int | None) -> list[GraphNode]:
        """The view and cast calls on the way from `end` back to `start` (its base)."""
        chain: list[GraphNode] = []
        value = end
        while value is not None and value != start:
            node = self.graph.producer(value)
            if node is None or node.op not in TRANSPARENT or not node.args:
                break
            chain.append(node)
            value = value_id(node.args[0])
        return chain if value == start else []

    def scalar(self, arg: Any) -> float | None:
        """A Python number, or the value of a constant 0-d tensor (torch.full([], v))."""
        if isinstance(arg, bool):
            return None
        if isinstance(arg, (int, float)):
            return float(arg)
        found = self.graph.value(self.base(value_id(arg)))
        if found is not None and found.scalar is not None:
            return found.scalar
        return None

    def dtype(self, value: int | None) -> str:
        found = self.graph.value(value)
        return found.dtype if found else self.ctx.record.dtype

    # -- claiming ------------------------------------------------------------------------------

    def is_claimed(self, node: GraphNode) -> bool:
        return self._position(node) in self.claimed

    def _position(self, node: GraphNode) -> int:
        return self.positions[id(node)]

    def any_claimed(self, nodes: Iterable[GraphNode]) -> bool:
        return any(self.is_claimed(n) for n in nodes)

    def site(self, kernel_type: str, nodes: Sequence[GraphNode], label: str,
             named: dict[str, int] | None, params: dict[str, Any], dtype: str,
             role: str = "") -> SiteKey:
        module = common_module([n.module for n in nodes])
        return self.ctx.site(kernel_type, module, label, named, params, dtype, role)

    def claim(self, nodes: Iterable[GraphNode], kernel_type: str, site: SiteKey) -> None:
        """The calls `nodes` are one call of `kernel_type` at `site`, in every forward."""
        positions = sorted({self._position(n) for n in nodes})
        self.claimed.update(positions)
        by_forward: list[list[OpCall]] = []
        for position in positions:
            for forward, ops in enumerate(self.ops_of.get(position, [])):
                while len(by_forward) <= forward:
                    by_forward.append([])
                by_forward[forward].extend(ops)
        for ops in by_forward:
            if ops:
                first = min(ops, key=lambda o: o.id)
                self.ctx.claim(ops, kernel_type, ("graph", first.id), site)

    def label_other(self, nodes: Iterable[GraphNode], label: str) -> None:
        """The calls are part of an op no pattern recognized: "other", under `label`."""
        positions = sorted({self._position(n) for n in nodes})
        self.claimed.update(positions)
        for position in positions:
            for ops in self.ops_of.get(position, []):
                self.ctx.label_other(ops, label)

    def root_op(self, node: GraphNode) -> OpCall | None:
        """The first forward's first profiler op of a call, for the single-op rules."""
        forwards = self.ops_of.get(self._position(node))
        return forwards[0][0] if forwards and forwards[0] else None


def common_module(paths: Sequence[str]) -> str:
    """The innermost module path every one of `paths` is inside."""
    if not paths:
        return ""
    parts = [p.split(".") if p else [] for p in paths]
    common: list[str] = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common)


def dim_list(dim: Any, ndim: int) -> list[int] | None:
    """A reduction's dims, non-negative and sorted; None when not a plain int or int list."""
    if isinstance(dim, bool) or ndim == 0:
        return None
    dims = [dim] if isinstance(dim, int) else dim
    if not isinstance(dims, list) or not dims or not all(
            isinstance(d, int) and not isinstance(d, bool) and -ndim <= d < ndim for d in dims):
        return None
    return sorted({d % ndim for d in dims})


def reduced_dim(gctx: GraphContext, node: GraphNode, default_all: bool = False) -> int | None:
    """The one dim a reduction (mean, sum, amax, var ...) runs over, non-negative."""
    x = gctx.shape(value_id(node.args[0]) if node.args else None)
    dim = argument(node, 1, "dim")
    if dim is None:
        return len(x) - 1 if default_all and len(x) == 1 else None
    dims = dim_list(dim, len(x))
    return dims[0] if dims and len(dims) == 1 else None


def whole_forward(gctx: GraphContext, nodes: Sequence[GraphNode]) -> bool:
    """Are `nodes` every call the forward of the module they run in made (the model's, for
    ""), but for calls that made no new value?"""
    path = nodes[-1].module if nodes else ""
    inside = [n for n in gctx.graph.nodes
              if not path or n.module == path or n.module.startswith(path + ".")]
    claimed = {id(n) for n in nodes}
    made = {v for n in nodes for v in n.outputs if v is not None}
    for node in inside:  # the result's views and casts (`y.to(dtype).view(shape)`) are the op's
        if id(node) not in claimed and node.op in TRANSPARENT and first_input(node) in made:
            claimed.add(id(node))
            made.update(v for v in node.outputs if v is not None)
    return bool(inside) and all(id(n) in claimed or is_alias(n) for n in inside)


def is_alias(node: GraphNode) -> bool:
    """A call that made no new value (`x.float()` of a float x, `.contiguous()` of a contiguous
    one): its outputs are its inputs."""
    reads = set(tensor_inputs(node))
    return all(v is None or v in reads for v in node.outputs)


def first_input(node: GraphNode | None) -> int | None:
    return value_id(node.args[0]) if node is not None and node.args else None
