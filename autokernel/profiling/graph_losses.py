"""Cross entropy and the LM head that feeds it, on the data-flow graph.

A loss is F.cross_entropy, or one written out: `F.nll_loss(F.log_softmax(x), t)`,
`-F.log_softmax(x).gather(-1, t[:, None]).mean()` (log_softmax may itself be
`x - x.logsumexp(-1, keepdim=True)`), or `(x.logsumexp(-1) - x.gather(-1, t[:, None])).mean()`
(the target's entry picked by gather or `x[torch.arange(N), t]`); unreduced, a negated per-token
pick is reduction "none". A loss none of whose inner values is read elsewhere (a z-loss reading
the logsumexp is not the loss alone).
An LM head is a linear layer of the hidden states whose output, through views, casts and a
shift (`logits[..., :-1, :]`), is the loss's logits: `lm_head(h)`, `F.linear(h, wte.weight)` or a
tied `h @ wte.weight.T`. Site notes: `loss` (a written-out form, which verify does not route),
`head` ("matmul" for `h @ W.T`, which verify's chain does not defer), `logits_rank`
(F.cross_entropy of [B, C, ...] logits), `reduction`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autokernel.profiling.site_readers import shape_numel
from autokernel.profiling.canonical import operands, region, same_dim
from autokernel.profiling.graph import GraphNode, argument, value_id
from autokernel.profiling.graph_match import GraphContext, dim_list, first_input, is_alias

CROSS_ENTROPY = "cross_entropy"
LM_HEAD_LOSS = "linear_cross_entropy"
# From the logits a loss reads back to the head that made them.
LOGIT_STEPS = ("view", "reshape", "contiguous", "float", "to", "type_as", "getitem", "flatten",
               "clone")


@dataclass
class Loss:
    logits: int
    targets: int | None
    output: int
    form: str  # "F.cross_entropy" or the written-out spelling
    reduction: str
    notes: dict[str, Any] = field(default_factory=dict)  # ignore_index, smoothing, weights


def log_softmax_of(gctx: GraphContext, value: int | None) -> int | None:
    """x when `value` is log_softmax(x) over the last dim: the op, or x - logsumexp(x)."""
    found = log_softmax_over(gctx, value)
    return found[0] if found is not None and found[1] == len(gctx.shape(found[0])) - 1 \
        else None


def log_softmax_over(gctx: GraphContext, value: int | None) -> tuple[int, int] | None:
    """(x, dim) when `value` is log_softmax(x) over one dim (non-negative): the op,
    x - logsumexp(x), or log(softmax(x))."""
    node = gctx.made_by(value, "log_softmax", "_log_softmax", "sub", "log")
    if node is None:
        return None
    if node.op == "log":  # log(softmax(x))
        node = gctx.made_by(first_input(node), "softmax")
        if node is None:
            return None
        x = first_input(node)
    elif node.op == "sub":
        a, b = (value_id(v) for v in operands(node))
        lse = gctx.made_by(b, "logsumexp")
        if lse is None or gctx.base(first_input(lse)) != gctx.base(a):
            return None
        x, node = first_input(lse), lse
    else:
        x = first_input(node)
    dims = dim_list(argument(node, 1, "dim"), len(gctx.shape(x)))
    if dims is None or len(dims) != 1:
        return None
    return gctx.base(x), same_dim(gctx.shape(x), gctx.shape(gctx.base(x)), dims[0])


def _pick(gctx: GraphContext, value: int | None) -> tuple[int | None, int | None] | None:
    """(x, t) when `value` is each row's target entry of x (through negations):
    x.gather(-1, t[..., None]) or x[torch.arange(N), t]."""
    node = gctx.made_by(value, "gather", "getitem", "neg", "mul")
    while node is not None and node.op in ("neg", "mul"):
        node = gctx.made_by(first_input(node), "gather", "getitem", "neg")
    if node is None:
        return None
    if node.op == "gather":
        return first_input(node), value_id(argument(node, 2, "index"))
    index = node.args[1] if len(node.args) > 1 else None
    if not isinstance(index, (list, tuple)) or len(index) != 2:
        return None
    rows, targets = (value_id(i) for i in index)
    arange = gctx.made_by(rows, "arange")
    x = first_input(node)
    shape = gctx.shape(x)
    if arange is None or targets is None or len(shape) != 2 or gctx.shape(rows) != shape[:1]:
        return None
    return x, targets


def _reduced_later(gctx: GraphContext, value: int | None) -> bool:
    """Is `value` read by a mean or sum (the loss's reduction, the anchor to match at)?"""
    return any(user.op in ("mean", "sum") for user in gctx.users(value))


def loss_of(gctx: GraphContext, node: GraphNode) -> Loss | None:
    if not node.outputs or node.outputs[0] is None:
        return None
    out = node.outputs[0]
    if node.op == "cross_entropy":
        return Loss(first_input(node), value_id(argument(node, 1, "target")), out,
                    "F.cross_entropy", str(argument(node, 6, "reduction", "mean")),
                    _loss_arguments(node))
    if node.op in ("nll_loss", "nll_loss_nd"):
        x = log_softmax_of(gctx, first_input(node))
        return Loss(x, value_id(argument(node, 1, "target")), out, "log_softmax + nll_loss",
                    str(argument(node, 6, "reduction", "mean")), _loss_arguments(node)) \
            if x is not None else None
    if node.op in ("neg", "sub"):  # a per-token loss, unreduced (reduction "none")
        if _reduced_later(gctx, out):
            return None
        reduction, inner = "none", out
    elif node.op in ("mean", "sum"):
        reduction, inner = node.op, first_input(node)
    else:
        return None
    sub = gctx.made_by(inner, "sub")
    if sub is not None:  # logsumexp(x) - x.gather(..)
        a, b = (value_id(v) for v in operands(sub))
        lse, picked = gctx.made_by(a, "logsumexp"), _pick(gctx, b)
        if lse is None or picked is None or gctx.base(first_input(lse)) != gctx.base(picked[0]):
            return None
        return Loss(gctx.base(first_input(lse)), picked[1], out, "logsumexp - gather",
                    reduction)
    one_hot = _one_hot_pick(gctx, inner) if reduction != "none" else None
    if one_hot is not None:
        return Loss(one_hot[0], one_hot[1], out, "one_hot · log_softmax", reduction)
    picked = _pick(gctx, inner)
    if picked is None or (reduction == "none" and gctx.made_by(inner, "neg") is None):
        return None  # unreduced, the picked log-probabilities are no loss until negated
    x = log_softmax_of(gctx, picked[0])
    return Loss(x, picked[1], out, "log_softmax + gather", reduction) if x is not None else None


def _one_hot_pick(gctx: GraphContext, value: int | None) -> tuple[int, int | None] | None:
    """(x, t) of -(one_hot(t) · log_softmax(x)).sum(-1)."""
    node = gctx.made_by(value, "neg", "sum")
    if node is not None and node.op == "neg":
        node = gctx.made_by(first_input(node), "sum")
    product = gctx.made_by(first_input(node), "mul") if node is not None else None
    if product is None:
        return None
    a, b = (value_id(v) for v in operands(product))
    for hot, logp in ((a, b), (b, a)):
        encoder = gctx.made_by(hot, "one_hot")
        x = log_softmax_of(gctx, logp)
        if encoder is not None and x is not None:
            return x, first_input(encoder)
    return None


def _loss_arguments(node: GraphNode) -> dict[str, Any]:
    """F.cross_entropy's / F.nll_loss's arguments the kernels do not take, as the notes
    `site_routes.unrouted_loss_arguments` reads."""
    notes: dict[str, Any] = {}
    ignore_index = argument(node, 4, "ignore_index", -100)
    if ignore_index != -100:
        notes["ignore_index"] = ignore_index
    if value_id(argument(node, 2, "weight")) is not None:
        notes["class_weights"] = True
    smoothing = argument(node, 7, "label_smoothing", 0.0)
    if smoothing:
        notes["label_smoothing"] = smoothing
    return notes


def _loss_params(gctx: GraphContext, loss: Loss) -> tuple[dict[str, int], dict[str, Any]]:
    shape = gctx.shape(loss.logits)
    params: dict[str, Any] = dict(loss.notes)
    if loss.form != "F.cross_entropy":
        params["loss"] = loss.form
    if loss.reduction != "mean":
        params["reduction"] = loss.reduction
    if len(shape) != 2 and loss.form == "F.cross_entropy":  # a written-out loss reads rows
        params["logits_rank"] = len(shape)
    vocab = shape[1] if loss.form == "F.cross_entropy" and len(shape) >= 2 else shape[-1]
    return {"M": shape_numel(shape) // max(1, vocab), "V": vocab}, params


def _head(gctx: GraphContext, logits: int) -> tuple[GraphNode, int, str] | None:
    """(the head call, the hidden states, "linear" or "matmul") behind the logits."""
    value = logits
    for _ in range(8):
        node = gctx.producer(value)
        if node is None:
            return None
        if node.op == "linear":
            weight = gctx.value(value_id(argument(node, 1, "weight")))
            return (node, first_input(node), "linear") if weight is not None and \
                weight.constant and len(weight.shape) == 2 else None
        if node.op == "matmul":
            a, b = (value_id(v) for v in node.args[:2])
            weight = gctx.value(gctx.base(b))
            if weight is not None and weight.constant and len(weight.shape) == 2 and \
                    weight.shape[0] == gctx.shape(logits)[-1]:
                return node, a, "matmul"
            return None
        if node.op not in LOGIT_STEPS:
            return None
        value = first_input(node)
    return None


def find_lm_head_loss(gctx: GraphContext) -> None:
    for node in gctx.graph.nodes:
        if gctx.is_claimed(node):
            continue
        loss = loss_of(gctx, node)
        if loss is None or loss.logits is None:
            continue
        head = _head(gctx, loss.logits)
        if head is None:
            continue
        call, hidden, kind = head
        nodes = region(gctx, loss.output, {gctx.base(hidden), hidden, loss.targets})
        if not nodes:
            continue
        dims, params = _loss_params(gctx, loss)
        width = gctx.shape(hidden)[-1]
        params.pop("logits_rank", None)
        if kind == "matmul":
            params["head"] = "matmul"
        if value_id(argument(call, 2, "bias")) is not None:
            params["bias"] = True
        named = {"N": dims["M"], "D": width, "V": dims["V"]}
        site = gctx.site(LM_HEAD_LOSS, nodes, f"lm head + {loss.form}", named, params,
                         gctx.dtype(hidden))
        gctx.claim(nodes, LM_HEAD_LOSS, site)


def find_cross_entropy(gctx: GraphContext) -> None:
    for node in gctx.graph.nodes:
        if gctx.is_claimed(node):
            continue
        loss = loss_of(gctx, node)
        if loss is None or loss.logits is None:
            continue
        nodes = region(gctx, loss.output, {loss.logits, gctx.base(loss.logits), loss.targets})
        if not nodes or _read_outside(gctx, nodes, loss.output):
            continue
        named, params = _loss_params(gctx, loss)
        label = "aten::cross_entropy_loss" if loss.form == "F.cross_entropy" else loss.form
        site = gctx.site(CROSS_ENTROPY, nodes, label, named, params, gctx.dtype(loss.logits))
        gctx.claim(nodes, CROSS_ENTROPY, site)


def _read_outside(gctx: GraphContext, nodes: list[GraphNode], output: int) -> bool:
    """Does a call outside `nodes` read a value they make before the loss (PaLM's z-loss reads
    the logsumexp)? A kernel that returns the loss alone would not make it."""
    inside = {id(n) for n in nodes}
    return any(user is not None and id(user) not in inside and not is_alias(user)
               for node in nodes for v in node.outputs
               if v is not None and v != output and not gctx.value(v).constant
               for user in gctx.graph.users(v))


def loss_notes_route(notes: dict[str, Any]) -> str | None:
    """"no: why" for a loss verify's F.cross_entropy route refuses, from the site's notes."""
    if "loss" in notes:
        return f"no: {notes['loss']} written out (only F.cross_entropy is routed)"
    if "logits_rank" in notes:
        return f"no: {notes['logits_rank']}-D logits (the route takes [N, V] logits)"
    if notes.get("head") == "matmul":
        return "no: the head is h @ W.T, not F.linear"
    return None
