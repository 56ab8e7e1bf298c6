"""Rotary embeddings on the data-flow graph, whatever the rotation's spelling.

A rotation of x is a call whose output has x's shape and whose region (`canonical.region`)
reads x and constant tables only (or tables computed from the position ids the forward was given:
`cos[position_ids]`, `(inv_freq @ position_ids).cos()`), through slices, negations, concatenations, stacks, products
and sums: rotate-half (`x·cos + rotate_half(x)·sin`), the two halves concatenated
(`cat([x1·cos - x2·sin, x2·cos + x1·sin])`), GPT-J's interleaved pairs (`stack((-x2, x1), -1)
.flatten(-2)`), or Meta's complex product (`view_as_real(view_as_complex(x) · freqs_cis)`).

The layout comes from how the tables broadcast against x: a table that varies along dim 1 of a
4-D x is [B, S, H, D], along dim 2 [B, H, S, D]. Site notes: `form` and `layout`.
"""

from __future__ import annotations

from typing import Any

from autokernel.profiling.canonical import region
from autokernel.profiling.graph import GraphNode, argument, tensor_inputs, value_id
from autokernel.profiling.graph_match import GraphContext, TRANSPARENT

KERNEL_TYPE = "rotary_embedding"
ROTATION_OPS = TRANSPARENT | {
    "getitem", "chunk", "split", "narrow", "unbind", "neg", "cat", "stack", "mul", "add", "sub",
    "view_as_complex", "view_as_real", "select",
}
ANCHORS = ("add", "sub", "cat", "flatten", "type_as", "to", "float", "view_as_real", "reshape",
           "view")


def _candidates(gctx: GraphContext, node: GraphNode, limit: int = 40,
                tables: frozenset[int] = frozenset()) -> list[int]:
    """The non-constant values of the anchor's shape that rotation-shaped calls behind it read,
    earliest first: the rotated x is the earliest one the whole rotation is made from."""
    out_shape = gctx.shape(node.outputs[0])
    found: dict[int, int] = {}  # value -> its producer's position (-1: none)
    pending = [node]
    seen: set[int] = set()
    while pending and len(seen) < limit:
        current = pending.pop()
        if id(current) in seen or current.op not in ROTATION_OPS:
            continue
        seen.add(id(current))
        for value in tensor_inputs(current):
            known = gctx.value(value)
            if known is None or known.constant or value in tables:
                continue
            producer = gctx.producer(value)
            if known.shape == out_shape:
                found[value] = producer.index if producer is not None else -1
            if producer is not None and not gctx.is_claimed(producer):
                pending.append(producer)
    return sorted(found, key=found.get)


def _form(nodes: list[GraphNode]) -> str | None:
    ops = {n.op for n in nodes}
    if "view_as_complex" in ops and "view_as_real" in ops:
        return "complex"
    if "mul" not in ops:
        return None
    if "stack" in ops:
        return "interleaved"
    if "cat" in ops and "neg" in ops:
        return "rotate_half"
    if "cat" in ops and "sub" in ops:
        return "cat halves"
    return None


def _layout(gctx: GraphContext, nodes: list[GraphNode], x_shape: list[int]) -> str:
    """BHSD or BSHD, from the dim along which a constant table varies."""
    for node in nodes:
        if node.op != "mul":
            continue
        for value in tensor_inputs(node):
            found = gctx.value(value)
            if found is None or not found.constant or len(found.shape) < 2:
                continue
            table = [1] * (len(x_shape) - len(found.shape)) + list(found.shape)
            if len(table) != len(x_shape) or len(x_shape) != 4:
                continue
            if table[1] > 1 and table[2] == 1:
                return "BSHD"
            if table[2] > 1:
                return "BHSD"
    return "BHSD"


# What cos/sin tables are computed with from position ids: no projection, no embedding.
TABLE_OPS = TRANSPARENT | {
    "getitem", "index_select", "mul", "matmul", "outer", "einsum", "cat", "stack", "cos", "sin",
    "add", "sub", "div", "neg", "pow", "repeat", "repeat_interleave", "arange",
}


def position_tables(gctx: GraphContext) -> tuple[set[int], frozenset[int]]:
    """(the integer tensors the forward was given, position ids; every value computed from
    those and constants alone by table math: `cos[position_ids]`, HF's `(inv_freq @
    position_ids).cos()`): tables the rotations read like constants, and share."""
    seeds: set[int] = set()
    tables: set[int] = set()
    for node in gctx.graph.nodes:
        reads = tensor_inputs(node)
        for v in reads:
            found = gctx.value(v)
            if found is not None and not found.constant and found.dtype.startswith("int") and \
                    gctx.producer(v) is None:
                seeds.add(v)
        if node.op in TABLE_OPS and node.outputs and any(v in tables or v in seeds
                                                         for v in reads) and all(
                v in tables or v in seeds or gctx.value(v).constant for v in reads):
            tables.update(v for v in node.outputs if v is not None)
    return seeds, frozenset(tables | seeds)


def _rotation(gctx: GraphContext, node: GraphNode, seeds: set[int] = frozenset(),
              tables: frozenset[int] = frozenset()) -> tuple[int, list[GraphNode], str] | None:
    """(x, the calls, the form) of a rotation of x that ends at `node`."""
    for x in _candidates(gctx, node, tables=tables):
        nodes = region(gctx, node.outputs[0], {x} | seeds, tables)
        if not nodes or any(n.op not in ROTATION_OPS for n in nodes
                            if not all(gctx.value(v).constant or v in tables
                                       for v in n.outputs if v)):
            continue
        form = _form(nodes)
        if form is not None:
            return x, nodes, form
    return None


def _rotary_dim(gctx: GraphContext, node: GraphNode, x: int, nodes: list[GraphNode]
                ) -> int | None:
    """The width rotated when it is less than x's last dim: the rotation ends in a cat over the
    last dim one of whose parts is a slice of x passed through untouched (GPT-NeoX's, GPT-J's
    and Phi's partial rotary, `cat((rotated, x[..., rotary_dim:]), -1)`)."""
    width = gctx.shape(x)[-1] if gctx.shape(x) else 0
    if node.op != "cat" or not node.args or not isinstance(node.args[0], list):
        return None
    dim = argument(node, 1, "dim", 0)
    if dim not in (-1, len(gctx.shape(x)) - 1):
        return None
    passed = 0
    for part in node.args[0]:
        value = value_id(part)
        if value is None:
            continue
        source = gctx.producer(value)
        while source is not None and source.op in TRANSPARENT and source.args:
            source = gctx.producer(value_id(source.args[0]))
        if source is not None and source.op in ("getitem", "narrow", "split", "chunk") and \
                gctx.base(value_id(source.args[0])) == gctx.base(x) and \
                source in nodes:
            passed += gctx.shape(value)[-1]
    return width - passed if 0 < passed < width else None


def find_rotary(gctx: GraphContext) -> None:
    seeds, tables = position_tables(gctx)
    for node in reversed(gctx.graph.nodes):
        if node.op not in ANCHORS or gctx.is_claimed(node) or not node.outputs:
            continue
        found = _rotation(gctx, node, seeds, tables)
        if found is None:
            continue
        x, nodes, form = found
        x_shape = gctx.shape(x)
        if len(x_shape) < 3:
            continue
        layout = _layout(gctx, nodes, x_shape)
        padded = [1] * (4 - len(x_shape)) + list(x_shape) if len(x_shape) < 4 else x_shape
        b, first, second, d = padded[0], padded[-3], padded[-2], padded[-1]
        named = ({"B": b, "H": second, "S": first, "D": d} if layout == "BSHD" else
                 {"B": b, "H": first, "S": second, "D": d})
        params: dict[str, Any] = {"form": form}
        rotated = _rotary_dim(gctx, node, x, nodes)
        if rotated is not None:
            params["rotary_dim"] = rotated
        if layout == "BSHD":
            params["layout"] = layout
        # The site is where the rotation runs, not where its cos/sin tables were sliced (a
        # model's forward that hands them to its blocks).
        work = [n for n in nodes if not all(gctx.value(v).constant or v in tables
                                            for v in n.outputs if v)]
        site = gctx.site(KERNEL_TYPE, work or nodes, f"rope({form})", named, params,
                         gctx.dtype(x))
        gctx.claim(nodes, KERNEL_TYPE, site)


def rotary_notes_route(notes: dict[str, Any]) -> str | None:
    form = notes.get("form")
    if form == "complex":
        return "no: a complex rotation (view_as_complex · freqs_cis), not rope(x, cos, sin)"
    if form == "interleaved":
        return "no: interleaved pairs (GPT-J), not rotate-half"
    if notes.get("rotary_dim") is not None:
        return f"no: partial rotary (only {notes['rotary_dim']} of each head's dims rotated)"
    return None
