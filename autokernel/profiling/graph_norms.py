"""RMSNorm and LayerNorm however they are written, and the residual add that feeds them, on the
data-flow graph (`graph_match.py`).

An RMSNorm is x times the reciprocal root mean square of x over one dim (`canonical.rms_of`:
rsqrt(mean(x²) + eps), 1 / sqrt(..), vector_norm(x) / √d), optionally times a weight as wide as
that dim; a LayerNorm is (x - mean(x)) over the root of the population variance plus eps
(`canonical.variance_of`: var(unbiased=False), var_mean, mean((x - mean)²)), optionally times a
weight plus a bias. Either may be the norm's own op (F.rms_norm, nn.LayerNorm, ...). When the
norm's input is a residual add of two tensors of its shape, the add and the norm are one call of
the fused type (add_rmsnorm, add_layernorm).

Site notes the route column reads (`norm_route`): `norm` ("module" when the norm is the whole
forward of a module, "inline" when it is written inside a larger one, else the function),
`weight_offset` (Gemma's (1 + w)), `axis` (a LayerNorm over a dim that is not the last),
`inplace_add` (`h += r`, which verify does not defer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autokernel.profiling.callsites import FINFO_EPS, SiteKey
from autokernel.profiling.site_readers import dims_over_axis, shape_numel
from autokernel.profiling.canonical import (
    close, mean_of, operands, plus_eps, region, rms_of, root_power, variance_of,
)
from autokernel.profiling.graph import GraphNode, argument, value_id
from autokernel.profiling.graph_match import GraphContext, dim_list, first_input, whole_forward
from autokernel.profiling.site_routes import CHAIN

NORM_OPS = {"rms_norm": "rmsnorm", "layer_norm": "layernorm"}
FUNCTIONS = {"rmsnorm": "F.rms_norm", "layernorm": "F.layer_norm"}
MODULE_TYPES = {"rmsnorm": "torch.nn.modules.normalization.RMSNorm",
                "layernorm": "torch.nn.modules.normalization.LayerNorm"}


@dataclass
class NormCall:
    kind: str  # "rmsnorm" or "layernorm"
    x: int  # the normalized tensor (a base value)
    axis: int  # the dim normalized over, non-negative
    output: int
    inputs: set[int | None]  # x and the weights: where the norm's region stops
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    own_op: GraphNode | None = None  # F.rms_norm / F.layer_norm, when that is the spelling


def factors(gctx: GraphContext, value: int | None, depth: int = 3
            ) -> list[tuple[int, bool]]:
    """The factors of a product (x · r · w in any order and grouping, x / r · w), each with
    whether it divides; a value made by anything else is one factor. Only products whose
    result nothing else reads are opened."""
    node = gctx.made_by(value, "mul", "div")
    if node is None or depth == 0 or len(node.args) < 2 or \
            (value != gctx.base(value) and len(gctx.users(gctx.base(value))) > 1):
        return [(gctx.base(value), False)] if value is not None else []
    a, b = (value_id(v) for v in operands(node))
    if a is None or b is None:
        return [(gctx.base(value), False)]
    opened = []
    for operand, divides in ((a, False), (b, node.op == "div")):
        inner = factors(gctx, operand, depth - 1) if len(gctx.users(operand)) <= 1 or \
            gctx.made_by(operand, "mul", "div") is None else [(gctx.base(operand), False)]
        opened += [(v, d != divides) for v, d in inner] if divides else inner
    return opened


def _split(gctx: GraphContext, value: int, is_scale: Any,
           parts: list[tuple[int, bool]] | None = None) -> tuple[int, Any, int | None] | None:
    """(x, the scale's description, the weight or None) when the product `value` (or `parts`,
    its factors) is x times a scale (`is_scale(value, divides)` describes it, else None) times
    at most one constant."""
    parts = factors(gctx, value) if parts is None else parts
    if not 2 <= len(parts) <= 3:
        return None
    for i, (scale_value, divides) in enumerate(parts):
        scale = is_scale(scale_value, divides)
        if scale is None:
            continue
        rest = parts[:i] + parts[i + 1:]
        if any(d for _, d in rest):
            continue
        for j, (x, _) in enumerate(rest):
            others = [v for k, (v, _) in enumerate(rest) if k != j]
            found = gctx.value(others[0]) if others else None
            if others and (found is None or not found.constant):
                continue
            return x, scale, others[0] if others else None
    return None


def _weight_notes(gctx: GraphContext, weight: int | None, width: int) -> dict[str, Any] | None:
    """{} for a weight as wide as the normalized dim ([N], or [C] viewed [C, 1, 1]), with
    `weight_offset` for Gemma's 1 + w; {"elementwise_affine": False} for none; None else."""
    if weight is None:
        return {"elementwise_affine": False}
    found = gctx.value(weight)
    if found is None or shape_numel(found.shape) != width:
        return None
    offset = gctx.made_by(weight, "add")
    if offset is not None:
        x, y = operands(offset)
        if close(gctx.scalar(x), 1.0) or close(gctx.scalar(y), 1.0):
            return {"weight_offset": 1.0}
    return {}


def _bias_after(gctx: GraphContext, value: int, width: int) -> tuple[int, int | None]:
    users = gctx.users(value)
    if len(users) == 1 and users[0].op == "add" and users[0].outputs:
        a, b = (value_id(v) for v in operands(users[0]))
        other = gctx.base(b if gctx.base(a) == value else a)
        found = gctx.value(other)
        if found is not None and found.constant and shape_numel(found.shape) == width:
            return users[0].outputs[0], other
    return value, None


def _terms(gctx: GraphContext, value: int | None, depth: int = 4) -> tuple[list[int], float]:
    """The tensor factors of a product and its coefficient, the numbers in it multiplied out
    (`n * 8.0 * g`, `n * g / 0.125`); a product something else also reads is one factor."""
    node = gctx.made_by(value, "mul", "div")
    if node is None or depth == 0 or len(node.args) < 2 or value is None:
        return ([gctx.base(value)] if value is not None else []), 1.0
    tensors: list[int] = []
    coefficient = 1.0
    for operand, divides in zip(operands(node), (False, node.op == "div")):
        number = gctx.scalar(operand)
        if number is not None and not (divides and number == 0):
            coefficient *= 1 / number if divides else number
            continue
        inner = value_id(operand)
        if inner is None or divides:
            return [gctx.base(value)], 1.0
        if len(gctx.users(inner)) == 1:
            found, factor = _terms(gctx, inner, depth - 1)
        else:
            found, factor = [gctx.base(inner)], 1.0
        tensors += found
        coefficient *= factor
    return tensors, coefficient


def _normalized_call(gctx: GraphContext, node: GraphNode) -> NormCall | None:
    """F.normalize(x, dim) · √d · w (lucidrains, x-transformers): x / max(‖x‖₂, eps) · √d is
    x over its RMS, the norm clamped at eps / √d instead of eps added under the root."""
    if node.op not in ("mul", "div") or not node.outputs:
        return None
    terms, coefficient = _terms(gctx, node.outputs[0])
    normalized = [t for t in terms if gctx.made_by(t, "normalize") is not None]
    if len(normalized) != 1 or not 1 <= len(terms) <= 2:
        return None
    norm = gctx.made_by(normalized[0], "normalize")
    x = first_input(norm)
    dims = dim_list(argument(norm, 2, "dim", 1), len(gctx.shape(x)))
    if argument(norm, 1, "p", 2.0) not in (2, 2.0) or dims is None or len(dims) != 1:
        return None
    width = gctx.shape(x)[dims[0]]
    if not close(coefficient, width ** 0.5):
        return None
    weight = next((t for t in terms if t != normalized[0]), None)
    if weight is not None and not (gctx.value(weight) and gctx.value(weight).constant):
        return None
    notes = _weight_notes(gctx, weight, width)
    if notes is None:
        return None
    params = {**notes, "eps": 0.0, "norm_clamp_min": argument(norm, 3, "eps", 1e-12)}
    return NormCall("rmsnorm", gctx.base(x), dims[0], node.outputs[0],
                    {gctx.base(x), weight} - {None}, params, "rmsnorm(F.normalize)")


def _rms_call(gctx: GraphContext, node: GraphNode) -> NormCall | None:
    """x · (1/rms) · w or x / rms · w, in any order; or F.normalize(x) · √d · w."""
    if node.op not in ("mul", "div") or not node.outputs:
        return None
    normalized = _normalized_call(gctx, node)
    if normalized is not None:
        return normalized

    def scale(value: int, divides: bool) -> Any:
        rms = rms_of(gctx, value)
        return rms if rms is not None and rms.reciprocal != divides else None

    found = _split(gctx, node.outputs[0], scale)
    if found is None:
        return None
    x, rms, weight = found
    if gctx.base(rms.x) != gctx.base(x):
        return None
    centered = gctx.made_by(rms.x, "sub")
    if centered is not None and mean_of(gctx, value_id(operands(centered)[1])):
        return None  # x - mean(x) over its RMS: a LayerNorm
    notes = _weight_notes(gctx, weight, gctx.shape(rms.x)[rms.dim])
    if notes is None:
        return None
    params: dict[str, Any] = {**notes, "eps": rms.eps if rms.eps is not None else 0.0}
    if rms.eps_outside:
        params["eps_outside_root"] = True
    return NormCall("rmsnorm", rms.x, rms.dim, node.outputs[0], {rms.x, weight} - {None},
                    params, "rmsnorm(written out)")


def _std(gctx: GraphContext, value: int | None) -> tuple[int | None, float | None, bool] | None:
    """(variance, eps, reciprocal) of sqrt(var + eps) or rsqrt(var + eps)."""
    node = gctx.made_by(value, "sqrt", "rsqrt", "pow")
    root = node.op if node is not None and node.op != "pow" else root_power(gctx, node)
    if node is None or root is None:
        return None
    variance, eps = plus_eps(gctx, first_input(node))
    return variance, eps, root == "rsqrt"


def _layernorm_call(gctx: GraphContext, node: GraphNode) -> NormCall | None:
    """(x - mean) / sqrt(var + eps) · w + b, or (x - mean) · rsqrt(var + eps) · w + b, in any
    order of the product."""
    if node.op not in ("mul", "div", "addcmul") or not node.outputs:
        return None

    def scale(value: int, divides: bool) -> Any:
        std = _std(gctx, value)
        return std if std is not None and std[2] != divides else None

    parts, added = None, None
    if node.op == "addcmul":  # torch.addcmul(b, x̂, w): b + x̂ · w
        tensors = [value_id(a) for a in node.args[:3]]
        if len(tensors) < 3 or None in tensors or argument(node, 3, "value", 1) != 1:
            return None
        parts = factors(gctx, tensors[1]) + factors(gctx, tensors[2])
        added = gctx.base(tensors[0])
    found = _split(gctx, node.outputs[0], scale, parts)
    if found is None:
        return None
    centered, std, weight = found
    sub = gctx.made_by(centered, "sub")
    if sub is None:
        return None
    x = gctx.base(first_input(sub))
    mean = mean_of(gctx, value_id(operands(sub)[1]))
    variance = variance_of(gctx, std[0], x)
    if mean is None or mean.x != x or variance is None or variance.dim != mean.dim:
        return None
    width = gctx.shape(x)[mean.dim]
    notes = _weight_notes(gctx, weight, width)
    if notes is None:
        return None
    output, bias = _bias_after(gctx, node.outputs[0], width) if weight is not None else \
        (node.outputs[0], None)
    if added is not None:
        found_bias = gctx.value(added)
        if weight is None or found_bias is None or not found_bias.constant or \
                shape_numel(found_bias.shape) != width:
            return None
        output, bias = node.outputs[0], added
    params = {**notes, "eps": std[1] if std[1] is not None else 0.0}
    return NormCall("layernorm", x, mean.dim, output, {x, weight, bias} - {None}, params,
                    "layernorm(written out)")


def _same_rows_base(gctx: GraphContext, x: int | None) -> int | None:
    """x before its views and casts where that value has x's last dim (`X.view(-1, d)` is a norm
    over X's rows); else x itself: an expanded parameter (Perceiver's latents [N, d] expanded over
    the batch) is normalized as the [B, N, d] rows the norm reads, a view that splits the last dim
    (heads) over the split-off dim."""
    base, shape = gctx.base(x), gctx.shape(x)
    base_shape = gctx.shape(base)
    if not base_shape or not shape or base_shape[-1] != shape[-1] \
            or shape_numel(base_shape) != shape_numel(shape):
        return x
    return base


def _own_op_call(gctx: GraphContext, node: GraphNode) -> NormCall | None:
    """F.rms_norm / F.layer_norm (nn.RMSNorm and nn.LayerNorm call them) over the last dims."""
    kind = NORM_OPS.get(node.op)
    if kind is None or not node.outputs:
        return None
    x = first_input(node)
    shape = gctx.shape(x)
    normalized = argument(node, 1, "normalized_shape")
    if not shape or not isinstance(normalized, list) or len(normalized) != 1:
        return None
    weight = argument(node, 2, "weight")
    bias = argument(node, 3, "bias") if kind == "layernorm" else None
    eps = argument(node, 4 if kind == "layernorm" else 3, "eps")
    if eps is None:
        eps = 1e-5 if kind == "layernorm" else FINFO_EPS.get(gctx.dtype(x))
    params: dict[str, Any] = {"eps": eps}
    if value_id(weight) is None:
        params["elementwise_affine"] = False
    base = _same_rows_base(gctx, x)
    inputs = {base, value_id(weight), value_id(bias)} - {None}
    return NormCall(kind, base, len(gctx.shape(base)) - 1, node.outputs[0], inputs, params,
                    f"aten::{node.op}", own_op=node)


def norm_calls(gctx: GraphContext, kind: str) -> list[NormCall]:
    """Every unclaimed norm of `kind` in the graph, latest first (an outer call before the
    calls inside it)."""
    found = []
    for node in reversed(gctx.graph.nodes):
        if gctx.is_claimed(node):
            continue
        call = _own_op_call(gctx, node)
        if call is None:
            call = _rms_call(gctx, node) if kind == "rmsnorm" else _layernorm_call(gctx, node)
        if call is not None and call.kind == kind:
            found.append(call)
    return found


def _module_note(gctx: GraphContext, call: NormCall, nodes: list[GraphNode]) -> str:
    """"module" when the norm is the whole forward of the module it runs in; else "inline"
    (written inside a larger forward) or, for the norm's own op, the function called."""
    path = nodes[-1].module
    info = gctx.ctx.record.modules.get(path)
    if call.own_op is not None:
        return "module" if info is not None and info.type == MODULE_TYPES[call.kind] else \
            FUNCTIONS[call.kind]
    return "module" if whole_forward(gctx, nodes) else "inline"


def _claim_norm(gctx: GraphContext, call: NormCall, kernel_type: str,
                add: GraphNode | None = None, residual: set[int | None] | None = None) -> bool:
    inputs = set(call.inputs) if add is None else (call.inputs - {call.x}) | (residual or set())
    nodes = region(gctx, call.output, inputs)
    if not nodes:
        return False
    x_shape = gctx.shape(call.x)
    named, axis = dims_over_axis(x_shape, call.axis)
    params = {**call.params, **axis, "norm": _module_note(gctx, call, nodes)}
    if add is not None:
        params["inplace_add"] = add.inplace or None
        params = {k: v for k, v in params.items() if v is not None}
        label = f"aten::add + {call.label}"
    else:
        label = call.label
    site = gctx.site(kernel_type, nodes, label, named, params, gctx.dtype(call.x))
    gctx.claim(nodes, kernel_type, site)
    return True


def _residual_add(gctx: GraphContext, x: int) -> tuple[GraphNode, set[int | None]] | None:
    """The add (out of place or `h += r`) of two tensors of x's shape that made x."""
    node = gctx.producer(x)
    if node is None or node.op != "add" or gctx.is_claimed(node) or len(node.args) < 2:
        return None
    a, b = (value_id(v) for v in operands(node))
    alpha = node.kwargs.get("alpha", 1)
    if a is None or b is None or alpha != 1 or gctx.shape(a) != gctx.shape(b) or \
            gctx.shape(a) != gctx.shape(x):
        return None
    if gctx.value(a).constant or gctx.value(b).constant:
        return None  # a bias, not a residual stream
    return node, {gctx.base(a), gctx.base(b), a, b}


def norm_pattern(kind: str):
    """The graph pattern of a norm type alone ("rmsnorm", "layernorm")."""

    def find(gctx: GraphContext) -> None:
        for call in norm_calls(gctx, kind):
            _claim_norm(gctx, call, kind)

    find.__name__ = f"find_{kind}_in_graph"
    return find


def add_norm_pattern(kernel_type: str, kind: str):
    """The graph pattern of a fused residual add + norm type: the norm's input is the add's
    output, and the norm is over its last dim."""

    def find(gctx: GraphContext) -> None:
        for call in norm_calls(gctx, kind):
            if call.axis != len(gctx.shape(call.x)) - 1:
                continue
            found = _residual_add(gctx, call.x)
            if found is not None:
                _claim_norm(gctx, call, kernel_type, *found)

    find.__name__ = f"find_add_{kind}_in_graph"
    return find


def norm_route(kind: str):
    """The site_route part every norm site found in the graph shares: None when the notes say
    nothing against the module route, else "no: why"."""

    def route(site: SiteKey) -> str | None:
        notes = dict(site.notes)
        if notes.get("weight_offset"):
            return "no: the weight is applied as (1 + w), which the module probe refuses"
        if "axis" in notes:
            return f"no: over dim {notes['axis']}, not the last"
        if notes.get("norm") == "inline":
            return "no: written inline, not a norm module's whole forward"
        if notes.get("eps_outside_root"):
            return "no: eps is added outside the root, which the module probe refuses"
        if notes.get("norm_clamp_min") is not None:
            return "no: the norm is clamped (F.normalize), not eps added under the root"
        return None

    return route


def fused_norm_route(site: SiteKey, function: str, module_type: str) -> str:
    """add_rmsnorm / add_layernorm: verify defers an out-of-place add into a norm module."""
    notes = dict(site.notes)
    if notes.get("inplace_add"):
        return "no: in-place add (h += r) is not deferred"
    norm = notes.get("norm", "module")
    if norm == "module":
        return norm_route("")(site) or CHAIN
    if norm == "inline":
        return "no: the norm is written inline, not a norm module"
    return f"no: {norm} outside nn.{module_type.rsplit('.', 1)[-1]}"

