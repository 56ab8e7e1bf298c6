"""The gated MLP pattern (fused_mlp): down(act(gate(x)) * up(x)) with three bias-free
aten::linear calls, act SiLU (SwiGLU) or GELU (GeGLU), claimed as ONE call.

The activation is the site's `activation` param, so the harness verifies the kernel for it and
verify refuses a site whose activation differs from the verified one
(`activation_mismatch`). SiLU is the op's default and records no param, as before GeGLU
was recognised. torch.profiler records no string arguments, so GELU's form comes from the
nn.GELU module around the call (approximate="tanh": "gelu_tanh"); an F.gelu written inline
records none and is taken as the exact form, as the gelu type takes it. A tanh-form MLP then
gets a kernel verified for the exact form, which verify's module probe refuses in fp32 (the two
forms differ by ~2e-4 relative) and takes in fp16/bf16, where they agree within tolerance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autokernel.profiling.callsites import significant_unclaimed, unclaimed_span, Context, SiteKey
from autokernel.profiling.site_readers import (
    arg_shape,
    arg_value,
    call_dtype,
    has_tensor,
    shape_numel,
)
from autokernel.profiling.events import ModuleInfo, OpCall
from autokernel.profiling.graph_mlp import gated_mlp_notes_route
from autokernel.profiling.site_routes import LINEAR_TYPES, MODULE, UNKNOWN

# act(gate(x)) * up(x) evaluates gate, act, up; up(x) * act(gate(x)) evaluates up, gate, act.
# "act" stands for any of ACTIVATION_OPS.
GATED_ORDERS = (
    ["aten::linear", "act", "aten::linear", "aten::mul", "aten::linear"],
    ["aten::linear", "aten::linear", "act", "aten::mul", "aten::linear"],
)
# aten op (in-place spellings folded in) -> the pattern's name in the site's op column.
ACTIVATION_OPS = {"aten::silu": "swiglu", "aten::silu_": "swiglu", "aten::gelu": "geglu",
                  "aten::gelu_": "geglu"}
# nn.GELU's `approximate` -> fused_mlp's activation.
GELU_FORMS = {"none": "gelu", "tanh": "gelu_tanh"}


def _is_plain_linear(op: OpCall) -> bool:
    return op.name == "aten::linear" and len(arg_shape(op, 1)) == 2 and not has_tensor(op, 2)


def _activation_params(act: OpCall, ctx: Context) -> dict[str, Any]:
    """The site's params for its activation op: {} for SiLU (the default), else GELU's form."""
    if ACTIVATION_OPS[act.name] == "swiglu":
        return {}
    approximate = arg_value(act, 1) or ctx.module_attr(act, ("approximate",))
    return {"activation": GELU_FORMS.get(str(approximate), "gelu")}


def _hidden_shape(window: list[OpCall], act: OpCall) -> list[int] | None:
    """[..., H] when the window's shapes chain as gate/up [H, D] then down [D, H], else None."""
    first, second, down = (op for op in window if op.name == "aten::linear")
    x, w = arg_shape(first, 0), arg_shape(first, 1)
    if not (all(_is_plain_linear(op) for op in (first, second, down))
            and arg_shape(second, 0) == x and arg_shape(second, 1) == w and len(x) >= 1):
        return None
    hidden, d = w[0], w[1]
    h_shape = x[:-1] + [hidden]
    mul = window[3]
    if (arg_shape(act, 0) == h_shape and arg_shape(mul, 0) == h_shape
            and arg_shape(mul, 1) == h_shape and arg_shape(down, 0) == h_shape
            and arg_shape(down, 1) == [d, hidden]):
        return h_shape
    return None


def find_gated_mlp(ctx: Context) -> None:
    """Claim every gate/act/up/mul/down window of unclaimed significant ops as a fused_mlp."""
    seq = significant_unclaimed(ctx)
    i = 0
    while i + 5 <= len(seq):
        window = seq[i:i + 5]
        names = ["act" if op.name in ACTIVATION_OPS else op.name for op in window]
        act = next((op for op in window if op.name in ACTIVATION_OPS), None)
        h_shape = _hidden_shape(window, act) if names in GATED_ORDERS and act else None
        if h_shape is None:
            i += 1
            continue
        first = window[0]
        x = arg_shape(first, 0)
        named = {"M": shape_numel(x[:-1]), "D": x[-1], "H": h_shape[-1]}
        kind = ACTIVATION_OPS[act.name]
        site = ctx.site("fused_mlp", ctx.common_module(window),
                        f"{kind}(aten::linear x3, {act.name.rstrip('_')}, aten::mul)", named,
                        _activation_params(act, ctx), call_dtype(first, ctx.record.dtype))
        ctx.claim(unclaimed_span(ctx, window[0], window[-1]), "fused_mlp", (kind, window[0].id),
                  site)
        i += 5


def is_gated_mlp_module(modules: Mapping[str, ModuleInfo], path: str) -> bool:
    """Three nn.Linear children and no other child with weights (an nn.GELU may be there): what
    the fused_mlp route takes (its probe then decides, for the verified activation)."""
    if not path or path not in modules:
        return False
    children = [(p, info) for p, info in modules.items()
                if p.startswith(path + ".") and "." not in p[len(path) + 1:]]
    linears = [p for p, info in children if info.type in LINEAR_TYPES]
    others = [p for p, info in children if info.type not in LINEAR_TYPES and any(
        q.startswith(p + ".") or q == p for q, i in modules.items() if i.params)]
    return len(linears) == 3 and not others


def gated_mlp_route(site: SiteKey, module_type: str | None,
                    modules: Mapping[str, ModuleInfo]) -> str:
    """fused_mlp's `OpSpec.site_route`: verify routes the MLP module, not loose linears."""
    why = gated_mlp_notes_route(dict(site.notes))
    if why:
        return why
    if module_type is None:
        return UNKNOWN
    if is_gated_mlp_module(modules, site.module):
        return MODULE
    return "no: gate/up/down are not the three Linears of one module"


def activation_mismatch(site_params: Mapping[str, Any], shape: list[int],
                        verified: Mapping[str, Any]) -> str | None:
    """fused_mlp's `OpSpec.param_mismatch`: a gated MLP of another activation fails the module
    probe. SiLU is the default, which a SwiGLU site and a target verified for it leave
    unnamed."""
    mine = site_params.get("activation", "silu")
    theirs = verified.get("activation", "silu")
    return None if mine == theirs else f"no: activation={mine} (verified: {theirs})"
