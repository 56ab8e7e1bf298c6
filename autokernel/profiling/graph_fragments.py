"""Pieces of an op no pattern recognized: never targets of their own.

A reduction whose result flows straight back, through a few elementwise calls, into a call that
also reads the reduction's own input (directly or through elementwise calls of it) is a piece
of a larger op: the mean inside a LayerNorm nobody recognized (`x - x.mean()`), the sum inside a
softmax (`e / e.sum()`). Optimizing it alone would time a kernel for work the model does not do
on its own, so it stays in "other", labeled as such (`FRAGMENT_LABEL`).
"""

from __future__ import annotations

from autokernel.profiling.graph import GraphNode, tensor_inputs
from autokernel.profiling.graph_match import GraphContext, first_input

REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "max", "min", "var", "std", "var_mean",
                        "std_mean", "logsumexp", "norm", "vector_norm", "prod"})
ELEMENTWISE = frozenset({"add", "sub", "mul", "div", "exp", "log", "sqrt", "rsqrt", "pow",
                         "square", "neg", "reciprocal", "abs", "maximum", "minimum", "clamp",
                         "where", "masked_fill", "tanh", "sigmoid", "erf", "erfc"})
HOPS = 4
FRAGMENT_LABEL = "{op} (part of an op no pattern recognized)"


def _downstream(gctx: GraphContext, values: list[int | None], hops: int) -> set[int]:
    """The elementwise calls reached from `values` within `hops` calls (ids of nodes)."""
    reached: set[int] = set()
    frontier = list(values)
    for _ in range(hops):
        following: list[int | None] = []
        for value in frontier:
            for user in gctx.users(value):
                if id(user) in reached or user.op not in ELEMENTWISE:
                    continue
                reached.add(id(user))
                following.extend(user.outputs)
        frontier = following
    return reached


def _upstream(gctx: GraphContext, value: int | None, hops: int) -> list[int | None]:
    """`value` and what the elementwise calls that made it read, within `hops` calls (x of the
    x² a norm's mean reduces)."""
    found = [value, gctx.base(value)]
    frontier = list(found)
    for _ in range(hops):
        following: list[int | None] = []
        for current in frontier:
            producer = gctx.producer(gctx.base(current))
            if producer is not None and producer.op in ELEMENTWISE:
                following.extend(tensor_inputs(producer))
        found += following
        frontier = following
    return found


def is_fragment(gctx: GraphContext, node: GraphNode) -> bool:
    source = first_input(node)
    from_result = _downstream(gctx, list(node.outputs), HOPS)
    from_source = _downstream(gctx, _upstream(gctx, source, 2), HOPS)
    return bool(from_result & from_source) or any(
        gctx.base(v) == gctx.base(source) for n in gctx.graph.nodes if id(n) in from_result
        for v in tensor_inputs(n))


def label_fragments(gctx: GraphContext) -> None:
    for node in gctx.graph.nodes:
        if node.op in REDUCTIONS and not gctx.is_claimed(node) and is_fragment(gctx, node):
            gctx.label_other([node], FRAGMENT_LABEL.format(op=f"aten::{node.op}"))
