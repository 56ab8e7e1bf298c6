"""Attention on the data-flow graph: softmax(q·kᵀ·scale [+ mask]) · v written out, and SDPA,
with their masks proved causal by value and their GQA repeats folded in.

Written out: from each softmax over the last dim (F.softmax, or one written out,
`softmax_of`), back through casts, a scale (a product with or division by a number), and a mask
(`masked_fill(mask, -inf)`, `torch.where(keep, s, -inf)`, `s + mask`) to q @ kᵀ (matmul, bmm
or einsum), and forward to P @ v. Whatever builds the mask (`bias[..] == 0`, `~mask`,
`torch.full(..).triu(1)`) is a side branch of constants, claimed with the call; a constant mask
whose values are the causal triangle (`recorder.mask_pattern`) makes the call causal, any other
mask stays a note. A scale applied to q before the product (timm) is recorded too.

GQA: k and v repeated to q's head count before the product or SDPA (`repeat_interleave` over
the heads, HF's `repeat_kv` expand + reshape) are folded into the call; `kv_heads` notes the
head count before the repeat.

Route notes (`attention_route`): `form` ("sdpa", "chain" or why verify's chain cannot take it:
"einsum", "bmm", "additive mask", "q scaled before q @ kᵀ"), `mask` (a mask the kernels do not
take), `kv_heads`, `attn_mask` (SDPA's mask argument, even a causal one: verify refuses it).
"""

from __future__ import annotations

import math
from typing import Any

from autokernel.profiling.site_readers import four_dims
from autokernel.profiling.canonical import amax_of, operands, region
from autokernel.profiling.graph import GraphNode, argument, value_id
from autokernel.profiling.graph_losses import log_softmax_over
from autokernel.profiling.graph_match import GraphContext, dim_list, first_input
from autokernel.profiling.recorder import OVER_HEADS

KERNEL_TYPE = "flash_attention"
PRODUCTS = ("matmul", "bmm", "einsum", "baddbmm")
CAUSAL_BOOL = {"masked_fill": "drop_upper", "where": "keep_lower"}
MASKED = -1e4  # a fill value at or below this masks a score out


def softmax_of(gctx: GraphContext, value: int | None) -> tuple[int, int] | None:
    """(x, dim) when `value` is a softmax of x over one dim: F.softmax, or exp(x - max) / sum
    (with amax or max(..).values, or with no shift at all)."""
    node = gctx.made_by(value, "softmax", "_softmax", "div", "mul", "exp")
    if node is None:
        return None
    if node.op == "exp":  # exp(log_softmax(x))
        return log_softmax_over(gctx, first_input(node))
    if node.op in ("softmax", "_softmax"):
        x = first_input(node)
        dims = dim_list(argument(node, 1, "dim"), len(gctx.shape(x)))
        return (x, dims[0]) if dims and len(dims) == 1 else None
    a, b = (value_id(v) for v in operands(node))
    exp = gctx.made_by(a, "exp")
    if exp is None:
        return None
    denominator = b
    if node.op == "mul":  # e * reciprocal(s), e * (1 / s)
        reciprocal = gctx.made_by(b, "reciprocal", "div")
        if reciprocal is None or (reciprocal.op == "div" and not (
                gctx.scalar(reciprocal.args[0]) == 1.0 and len(reciprocal.args) > 1)):
            return None
        denominator = first_input(reciprocal) if reciprocal.op == "reciprocal" else \
            value_id(reciprocal.args[1])
    total = gctx.made_by(denominator, "sum")
    exp_again = gctx.made_by(first_input(total), "exp") if total else None
    if exp_again is None or gctx.base(first_input(exp_again)) != gctx.base(first_input(exp)):
        return None
    dims = dim_list(argument(total, 1, "dim"), len(gctx.shape(first_input(total))))
    if not dims or len(dims) != 1:
        return None
    shifted = gctx.made_by(first_input(exp), "sub")
    if shifted is not None:
        x, shift = (value_id(v) for v in operands(shifted))
        found = amax_of(gctx, shift)
        if found is not None and found.x == gctx.base(x) and found.dim == dims[0]:
            return gctx.base(x), dims[0]
    return gctx.base(first_input(exp)), dims[0]


def _heads_before(before: list[int], after: list[int]) -> int | None:
    """The head count before a GQA repeat that made `after` from `before`: the one dim (not
    the last, head_dim) in which they differ, `after`'s a multiple of `before`'s, in either
    layout ([B, H, S, D] or [B, S, H, D])."""
    if len(before) != len(after) or len(after) not in (3, 4):
        return None
    grown = [d for d in range(len(after) - 1) if before[d] != after[d]]
    if len(grown) != 1 or before[-1] != after[-1]:
        return None
    d = grown[0]
    return before[d] if before[d] and after[d] % before[d] == 0 else None


def _ungrouped(gctx: GraphContext, value: int | None) -> tuple[int | None, int | None]:
    """(the value before a GQA repeat over the heads, its head count) or (value, None)."""
    node = gctx.producer(value)
    seen = 0
    while node is not None and seen < 8:
        if node.op == "repeat_interleave":
            source = first_input(node)
            heads = _heads_before(gctx.shape(source), gctx.shape(value))
            return (source, heads) if heads is not None else (value, None)
        if node.op == "expand" and node.args:  # one KV head expanded (Falcon's, BigCode's MQA)
            source = first_input(node)  # [B, 1, S, D], maybe a split's [B, S, D] unsqueezed
            heads = _heads_before(gctx.shape(source), gctx.shape(value))
            return (source, heads) if heads == 1 else (value, None)
        if node.op in ("reshape", "view", "flatten") and node.args:
            expand = gctx.producer(first_input(node))
            if expand is not None and expand.op == "expand":  # HF's, Meta's repeat_kv
                source = first_input(expand)
                inserted = gctx.producer(source)  # x[:, :, None] or x.unsqueeze(2)
                if inserted is None or inserted.op not in ("getitem", "unsqueeze"):
                    inserted = gctx.producer(gctx.base(source))
                if inserted is not None and inserted.op in ("getitem", "unsqueeze"):
                    source = first_input(inserted)
                # The value the repeat reads ([B, KV, S, D]), or the one before its views where
                # only that has the heads' layout; a key made by views of a projection in the
                # model (k_proj(x).view(..).transpose(1, 2)) is read where it has the heads.
                for candidate in (source, gctx.base(source)):
                    heads = _heads_before(gctx.shape(candidate), gctx.shape(value))
                    if heads is not None:
                        return candidate, heads
        if node.op not in ("contiguous", "clone", "to", "float", "type_as", "transpose", "mT"):
            return value, None
        value = first_input(node)
        node = gctx.producer(value)
        seen += 1
    return value, None


def _masking(gctx: GraphContext, node: GraphNode) -> tuple[int | None, int | None, str] | None:
    """(the scores before, the mask, its kind: "causal", "causal additive", "zeros" or "mask")
    of a call that masks scores, else None."""
    if node.op == "masked_fill" and len(node.args) >= 2:
        scores, mask, fill = first_input(node), value_id(node.args[1]), argument(node, 2, "value")
    elif node.op == "where" and len(node.args) >= 3:
        scores, mask, fill = value_id(node.args[1]), value_id(node.args[0]), node.args[2]
    elif node.op == "add" and len(node.args) >= 2:
        a, b = (value_id(v) for v in operands(node))
        if a is None or b is None:
            return None
        out = gctx.shape(node.outputs[0]) if node.outputs else []
        a_is_scores = gctx.shape(a) == out and not (
            gctx.value(a).constant and not gctx.value(b).constant)
        scores, mask = (a, b) if a_is_scores else (b, a)
        pattern = gctx.value(mask).pattern
        kind = {"causal_additive": "causal additive", "zeros": "zeros"}.get(pattern, "mask")
        return scores, mask, kind
    else:
        return None
    found = gctx.value(mask)
    filled = gctx.scalar(fill)
    if found is None or filled is None or filled > MASKED:
        return scores, mask, "mask"
    if found.pattern == CAUSAL_BOOL[node.op] + OVER_HEADS:
        shape, mask_shape = gctx.shape(scores), gctx.shape(mask)
        heads_between = len(shape) >= 3 and shape[-2] > 1 and \
            list(shape[-3:]) == [mask_shape[-3], shape[-2], mask_shape[-1]]
        return scores, mask, "causal over heads" if heads_between else "mask"
    return scores, mask, "causal" if found.pattern == CAUSAL_BOOL[node.op] else "mask"


def _scores_source(gctx: GraphContext, value: int | None) -> dict[str, Any] | None:
    """Back from the softmax input to q @ kᵀ: its call, the scale and the masks on the way."""
    found: dict[str, Any] = {"scale": 1.0, "mask": "", "mask_values": []}
    for _ in range(12):
        node = gctx.producer(value)
        if node is None:
            return None
        if node.op in PRODUCTS:
            found["product"] = node
            if node.op == "baddbmm":  # beta · input + alpha · q @ kᵀ, with beta 0 or zeros
                if gctx.scalar(argument(node, 3, "beta", 1.0)) != 0 and \
                        not _zeros(gctx, first_input(node)):
                    return None
                found["scale"] *= gctx.scalar(argument(node, 4, "alpha", 1.0)) or 1.0
            return found
        if node.op in ("float", "to", "type_as", "contiguous", "dropout", "view", "reshape"):
            value = first_input(node)
            continue
        if node.op in ("mul", "div"):
            a, b = operands(node)
            factor = gctx.scalar(b)
            tensor = value_id(a)
            if factor is None and node.op == "mul":
                factor, tensor = gctx.scalar(a), value_id(b)
            if factor is None or factor == 0 or tensor is None:
                return None
            found["scale"] *= factor if node.op == "mul" else 1 / factor
            value = tensor
            continue
        masking = _masking(gctx, node)
        if masking is None:
            return None
        value, mask, kind = masking
        if kind == "causal over heads":
            found["heads_view"] = list(gctx.shape(value))
        if kind != "zeros":
            found["mask"] = kind if not found["mask"] else "mask"
        if kind == "mask" or not gctx.value(mask).constant:
            found["mask_values"].append(mask)
    return None


def _zeros(gctx: GraphContext, value: int | None) -> bool:
    """Is `value` a constant of zeros (`torch.zeros(..)`, `zeros_like`, `new_zeros`, a full of
    0), so that adding it changes nothing (GPT-NeoX's baddbmm(zeros, q, kᵀ, beta=1.0))?"""
    found = gctx.value(value)
    if found is None or not found.constant:
        return False
    if found.pattern == "zeros" or found.scalar == 0:
        return True
    node = gctx.producer(gctx.base(value))
    if node is None:
        return False
    if node.op in ("zeros", "zeros_like", "new_zeros"):
        return True
    fill = argument(node, 1, "fill_value") if node.op in ("full", "full_like", "new_full") \
        else None
    return fill is not None and gctx.scalar(fill) == 0


def _operands_of_product(gctx: GraphContext, node: GraphNode) -> tuple[int | None, int | None]:
    """(q, k) of q @ kᵀ: the second operand's transpose looked through; einsum's by its
    equation ("...qd,...kd->...qk")."""
    if node.op == "einsum":
        equation = node.args[0] if node.args else ""
        tensors = [value_id(v) for v in node.args[1:]] if len(node.args) > 2 else \
            [value_id(v) for v in (node.args[1] if len(node.args) > 1 else [])]
        if not isinstance(equation, str) or len(tensors) != 2:
            return None, None
        left, _, out = equation.replace(" ", "").partition("->")
        a, _, b = left.partition(",")
        if len(a) < 2 or len(b) < 2 or a[-1] != b[-1] or out[-1:] != b[-2:-1]:
            return None, None
        return tensors[0], tensors[1]
    q, kt = (value_id(v) for v in (node.args[1:3] if node.op == "baddbmm" else node.args[:2]))
    transpose = gctx.producer(kt)
    if transpose is None or transpose.op not in ("transpose", "mT", "permute", "T"):
        if gctx.value(kt) is not None and gctx.value(kt).transposed:
            return q, kt
        return None, None
    return q, first_input(transpose)


def _heads_in_rows(gctx: GraphContext, source: dict[str, Any], q_shape: list[int],
                   k: int | None) -> list[int] | None:
    """[B, H, S, D] of a multi-query attention whose heads are folded into q's rows
    (GPT-BigCode: q [B, S·H, D] against the one key [B, K, D], the scores viewed [B, S, H, K]
    where its causal mask [.., S, 1, K] applies), else None."""
    view = source.get("heads_view")
    k_shape = gctx.shape(k)
    if source["mask"] != "causal over heads" or not view or len(view) != 4 or \
            len(q_shape) != 3 or len(k_shape) != 3:
        return None
    b, s, h, kv_len = view
    if q_shape[0] != b or q_shape[1] != s * h or k_shape[0] != b or k_shape[1] != kv_len or \
            k_shape[2] != q_shape[2]:
        return None
    return [b, h, s, q_shape[2]]


def _prescale(gctx: GraphContext, q: int | None) -> tuple[int | None, float]:
    """q (or k) before a `q * scale` applied ahead of the product (timm), and that scale."""
    node = gctx.made_by(q, "mul", "div")
    if node is None:
        return q, 1.0
    a, b = operands(node)
    factor = gctx.scalar(b)
    if factor is None or value_id(a) is None:
        return q, 1.0
    return value_id(a), (factor if node.op == "mul" else 1 / factor)


def find_explicit_attention(gctx: GraphContext) -> None:
    for node in gctx.graph.nodes:
        if gctx.is_claimed(node) or not node.outputs:
            continue
        probabilities = node.outputs[0]
        softmax = softmax_of(gctx, probabilities)
        if softmax is None or softmax[1] != len(gctx.shape(softmax[0])) - 1:
            continue
        source = _scores_source(gctx, softmax[0])
        if source is None:
            continue
        q, k = _operands_of_product(gctx, source["product"])
        users = [u for u in gctx.users(probabilities) if u.op in PRODUCTS]
        if q is None or k is None or len(users) != 1:
            continue
        pv = users[0]
        if pv.op == "einsum":
            v = value_id(pv.args[-1]) if len(pv.args) > 2 else None
        else:
            if gctx.base(value_id(pv.args[0])) != gctx.base(probabilities):
                continue
            v = value_id(pv.args[1])
        q_shape = gctx.shape(q)
        if len(q_shape) < 3 or v is None:
            continue
        if source["mask"] == "mask":
            continue  # a mask no kernel reproduces: its softmax and products stay targets
        heads_in_rows = _heads_in_rows(gctx, source, q_shape, k)
        if source["mask"] == "causal over heads" and heads_in_rows is None:
            continue
        q_unscaled, prescale = _prescale(gctx, q)
        k, k_prescale = _prescale(gctx, k)  # q and k each scaled by D^-¼ (Whisper)
        prescale *= k_prescale
        k_source, kv_heads = _ungrouped(gctx, k)
        v_source, _ = _ungrouped(gctx, v)
        inputs = {q_unscaled, gctx.base(q_unscaled), k_source, v_source, gctx.base(k_source),
                  gctx.base(v_source), *source["mask_values"]}
        nodes = region(gctx, pv.outputs[0], inputs)
        if not nodes:
            continue
        scale = source["scale"] * prescale
        # The scale as written (1.0 when nothing scales the scores: T5), never the default.
        params: dict[str, Any] = {
            "causal": source["mask"] in ("causal", "causal additive", "causal over heads"),
            "scale": scale}
        if source["mask"] == "mask":
            params["mask"] = True
        if kv_heads is not None:
            params["kv_heads"] = kv_heads
        if len(q_shape) != 4:
            params["rank"] = len(q_shape)
        if heads_in_rows is not None:
            kv_heads = params["kv_heads"] = 1
        q_len, k_shape = (heads_in_rows or q_shape)[-2], gctx.shape(k)
        if len(k_shape) >= 2 and k_shape[-2] != q_len:  # cross-attention (Whisper's, Perceiver's)
            params["kv_len"] = k_shape[-2]
        params["form"] = ("heads in rows" if heads_in_rows is not None else
                          "einsum" if "einsum" in (source["product"].op, pv.op) else
                          "bmm" if "bmm" in (source["product"].op, pv.op) else
                          "additive mask" if source["mask"] == "causal additive" else
                          "q scaled before q @ kᵀ" if prescale != 1.0 else "chain")
        label = "softmax(QK^T)V(" + ", ".join([source["product"].op, "softmax", pv.op]) + ")"
        site = gctx.site(KERNEL_TYPE, nodes, label, four_dims(heads_in_rows or q_shape), params,
                         gctx.dtype(q))
        gctx.claim(nodes, KERNEL_TYPE, site)


def find_sdpa(gctx: GraphContext) -> None:
    """F.scaled_dot_product_attention: its scale, causal flag and mask from the call's own
    arguments (a constant causal mask makes it causal), GQA repeats before it folded in."""
    for node in gctx.graph.nodes:
        if node.op != "scaled_dot_product_attention" or gctx.is_claimed(node) or \
                not node.outputs:
            continue
        q, k, v = (value_id(argument(node, i, name)) for i, name in
                   enumerate(("query", "key", "value")))
        mask = value_id(argument(node, 3, "attn_mask"))
        q_shape = gctx.shape(q)
        if len(q_shape) < 3:
            continue
        causal = bool(argument(node, 5, "is_causal", False))
        params: dict[str, Any] = {}
        if mask is not None:
            pattern = gctx.value(mask).pattern if gctx.value(mask) else ""
            causal = causal or pattern in ("keep_lower", "causal_additive")
            params["attn_mask"] = True
        params["causal"] = causal
        scale = argument(node, 6, "scale")
        if isinstance(scale, (int, float)) and not math.isclose(scale, q_shape[-1] ** -0.5,
                                                                rel_tol=1e-4):
            params["scale"] = float(scale)
        k_source, kv_heads = _ungrouped(gctx, k)
        v_source, _ = _ungrouped(gctx, v)
        if kv_heads is None and len(gctx.shape(k)) >= 3 and gctx.shape(k)[-3] != q_shape[-3]:
            params["kv_heads"] = gctx.shape(k)[-3]  # enable_gqa: verify refuses it
            params["gqa"] = "enable_gqa"
        elif kv_heads is not None:
            params["kv_heads"] = kv_heads
        if len(gctx.shape(k)) >= 2 and gctx.shape(k)[-2] != q_shape[-2]:
            params["kv_len"] = gctx.shape(k)[-2]
        params["form"] = "sdpa"
        nodes = region(gctx, node.outputs[0], {q, k_source, v_source, mask, k, v}) or [node]
        site = gctx.site(KERNEL_TYPE, nodes, "aten::scaled_dot_product_attention",
                         four_dims(q_shape), params, gctx.dtype(q))
        gctx.claim(nodes, KERNEL_TYPE, site)


def attention_route(site_notes: dict[str, Any], site_params: dict[str, Any]) -> str | None:
    """"no: why" for an attention site found in the graph that verify cannot take, None when
    its form is one verify routes (SDPA without a mask or GQA, the written-out chain)."""
    form = site_notes.get("form")
    if form is None:
        return None
    if form == "sdpa":
        if site_notes.get("attn_mask"):
            return "no: attn_mask"
        if site_notes.get("gqa") == "enable_gqa":
            return "no: k/v heads differ from q's"
        if "kv_len" in site_notes:
            return "no: k/v length differs from q's"
        return None
    if site_notes.get("mask"):
        return "no: a mask that is not causal"
    if "kv_len" in site_notes:
        return "no: k/v length differs from q's"
    if "rank" in site_notes:
        return f"no: {site_notes['rank']}-D q (verify's chain takes [B, H, S, D])"
    if form != "chain":
        return f"no: {form} (verify's chain takes q @ kᵀ with torch.matmul)"
    return None
