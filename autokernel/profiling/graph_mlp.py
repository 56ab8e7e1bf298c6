"""The gated MLP on the data-flow graph: down(act(gate(x)) · up(x)), however it is written.

The activation is a SiLU or a GELU in any spelling (`canonical.silu_of`, `canonical.gelu_of`:
F.silu, nn.SiLU, g · sigmoid(g), NewGELU's tanh formula); gate and up are two linear layers of
one input, or the two halves of one fused projection (Phi-3's `gate_up_proj(x).chunk(2, -1)`,
a `split`, or slices of it); down is a linear layer of the product. Site notes: `fused` (one
projection for gate and up, which verify's module route does not take) and `bias`.
"""

from __future__ import annotations

from typing import Any

from autokernel.profiling.canonical import gelu_of, operands, region, silu_of
from autokernel.profiling.graph import GraphNode, argument, value_id
from autokernel.profiling.graph_match import GraphContext, first_input

KERNEL_TYPE = "fused_mlp"
SPLITS = ("chunk", "split", "getitem", "unbind", "tensor_split")
GELU_ACTIVATIONS = {"none": "gelu", "tanh": "gelu_tanh"}


def _weight_product(gctx: GraphContext, node: GraphNode | None) -> bool:
    """`x @ W`, `x.matmul(W)`, `torch.mm(x, W)` of a 2-D weight: a constant matrix (a
    parameter, a view or slice of one, `w.t()`), the activation x not constant. A linear layer
    written as a product, as raw-weight expert code (DBRX's `x.matmul(w1.t())`) does."""
    if node is None or node.op not in ("matmul", "mm") or len(node.args) < 2:
        return False
    x, weight = (gctx.value(value_id(v)) for v in operands(node)[:2])
    return x is not None and weight is not None and weight.constant and \
        not x.constant and len(weight.shape) == 2


def _is_projection(gctx: GraphContext, node: GraphNode | None) -> bool:
    if node is not None and node.op == "linear":
        return len(gctx.shape(value_id(argument(node, 1, "weight")))) == 2
    return _weight_product(gctx, node)


def _projection(gctx: GraphContext, value: int | None) -> tuple[GraphNode, bool] | None:
    """(the linear call that made `value`, whether `value` is one part of its output)."""
    node = gctx.producer(gctx.base(value))
    fused = False
    if node is not None and node.op in SPLITS:
        node = gctx.made_by(first_input(node), "linear", "matmul", "mm")
        fused = True
    if not _is_projection(gctx, node):
        return None
    return node, fused


def _activation(gctx: GraphContext, value: int | None) -> tuple[int, dict[str, Any]] | None:
    gate = silu_of(gctx, value)
    if gate is not None:
        return gate, {}
    gelu = gelu_of(gctx, value)
    if gelu is not None:
        return gelu.x, {"activation": GELU_ACTIVATIONS.get(gelu.approximate, "gelu")}
    return None


def find_gated_mlp(gctx: GraphContext) -> None:
    for node in gctx.graph.nodes:
        if node.op != "mul" or gctx.is_claimed(node) or not node.outputs:
            continue
        a, b = (value_id(v) for v in operands(node))
        for activated, other in ((a, b), (b, a)):
            found = _activation(gctx, activated)
            if found is None:
                continue
            gate_value, params = found
            gate, up = _projection(gctx, gate_value), _projection(gctx, other)
            if gate is None or up is None:
                continue
            x = gctx.base(first_input(gate[0]))
            if x != gctx.base(first_input(up[0])):
                continue
            downs = [u for u in gctx.users(node.outputs[0]) if _is_projection(gctx, u)
                     and gctx.base(first_input(u)) == gctx.base(node.outputs[0])]
            if len(downs) != 1:
                continue
            down = downs[0]
            nodes = region(gctx, down.outputs[0], {x})
            if not nodes:
                continue
            x_shape = gctx.shape(x)
            hidden = gctx.shape(node.outputs[0])[-1]
            named = {"M": max(1, _rows(x_shape)), "D": x_shape[-1], "H": hidden}
            if gate[0] is up[0] or gate[1]:
                params["fused"] = "gate_up"
            if any(n.op == "linear" and value_id(argument(n, 2, "bias")) is not None
                   for n in (gate[0], up[0], down)):
                params["bias"] = True
            if any(n.op != "linear" for n in (gate[0], up[0], down)):
                params["projection"] = "matmul"
            kind = "swiglu" if "activation" not in params else "geglu"
            site = gctx.site(KERNEL_TYPE, nodes, f"{kind}(written out)", named, params,
                             gctx.dtype(x))
            gctx.claim(nodes, KERNEL_TYPE, site)
            break


def _rows(shape: list[int]) -> int:
    rows = 1
    for size in shape[:-1]:
        rows *= size
    return rows


def gated_mlp_notes_route(notes: dict[str, Any]) -> str | None:
    """"no: why" for a gated MLP verify's module route cannot take, from the site's notes."""
    if notes.get("fused"):
        return "no: gate and up are one fused Linear (the route takes three)"
    if notes.get("bias"):
        return "no: a projection has a bias"
    if notes.get("projection"):
        return "no: a projection is a matmul by a weight, not a Linear (the route takes three)"
    return None
