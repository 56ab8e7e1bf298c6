"""The fused residual add + norm pattern (add_rmsnorm, add_layernorm): an aten::add of two
same-shape tensors whose very next significant op is a norm of that shape, claimed as ONE call.

A pre-norm block writes `h = x + attn(x); y = self.norm(h)`; HF's decoder layers write
`hidden = residual + hidden; residual = hidden; hidden = self.post_attention_layernorm(hidden)`.
The profile records no tensor identities, so "the norm's input is the add's result" is read as
"nothing that does work runs between them, and the shapes agree". The norm is the norm type's
own aten op (aten::rms_norm, aten::layer_norm: nn.RMSNorm, F.rms_norm, nn.LayerNorm), or the ops
the norm type's pattern already claimed as one call (a hand-written RMSNorm module), which is why
these patterns run after the norm types' (`patterns.PATTERN_ORDER`). The fused call's time is
the sum of the add's and the norm's.

The site's `norm` note says whether verify can route it: "module" (an nn.Module it can tap),
else the function the model calls outside one (`NormAfterAdd.site_route`). Each fused type's op
entry declares its norm (`NormAfterAdd`): its ops, its module and its function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autokernel.profiling.callsites import Context, SiteKey
from autokernel.profiling.site_readers import arg_shape, arg_value, call_dtype, shape_numel
from autokernel.profiling.events import ModuleInfo, OpCall
from autokernel.profiling.op_rules import op_rules
from autokernel.profiling.graph_norms import fused_norm_route


@dataclass(frozen=True)
class NormAfterAdd:
    """The norm a fused residual add + norm type ends in, as its op entry declares it."""

    norm_type: str  # the kernel type of the norm alone, whose pattern may have claimed it
    aten_ops: tuple[str, ...]  # the norm type's aten ops
    module_type: str  # the ModuleInfo type of the module that calls one as its whole forward
    function: str  # how the model calls it outside that module: the site's `norm` note

    def site_route(self, site: SiteKey, module_type: str | None,
                   modules: Mapping[str, ModuleInfo]) -> str:
        """The fused type's `OpSpec.site_route`: verify defers the add into the norm module it
        feeds (`integrate/residual_norm.py`), and taps no norm outside a module; nor does it
        defer an in-place add (`h += r`)."""
        return fused_norm_route(site, self.function, self.module_type)


RESIDUAL_ADDS = ("aten::add",)  # out of place only: `h += r` is not deferred by verify


def _residual_add(op: OpCall) -> list[int] | None:
    """The shape of an add of two same-shape tensors (alpha 1), else None."""
    if op.name not in RESIDUAL_ADDS or len(op.shapes) < 2:
        return None
    a, b = arg_shape(op, 0), arg_shape(op, 1)
    alpha = arg_value(op, 2)
    if not a or a != b or alpha not in (None, 1):
        return None
    return a


def _next_significant(ctx: Context, op: OpCall) -> OpCall | None:
    """The next op after `op` that does work, within the same forward: the profile records
    several, and a block's last add is otherwise paired with the next forward's first norm."""
    for later in ctx.roots[ctx.position[op.id] + 1:]:
        if ctx.significant(later):
            return later if later.scopes[:1] == op.scopes[:1] else None
    return None


def _norm_call(ctx: Context, norm: NormAfterAdd, op: OpCall, shape: list[int]
               ) -> tuple[list[OpCall], dict[str, int], dict[str, Any], str] | None:
    """(the norm's ops, its dims, its params with the `norm` note, its label) when `op` starts a
    last-dim norm of `shape`, else None."""
    claim = ctx.claims.get(op.id)
    if claim is None and op.name in norm.aten_ops:
        if arg_shape(op, 0) != shape:
            return None
        extracted = op_rules()[op.name].extract(op, ctx)
        if extracted is None:
            return None
        named, params = extracted
        module = ctx.record.modules.get(ctx.module_path(op))
        is_module = module is not None and module.type == norm.module_type
        return [op], named, {**params, "norm": "module" if is_module else norm.function}, op.name
    if claim is None or claim.kernel_type != norm.norm_type or len(claim.site.shape) != 2:
        return None  # not a norm, or one over a dim that is not the last
    m, n = claim.site.shape
    if n != shape[-1] or m * n != shape_numel(shape):
        return None
    ops = [other for other in ctx.roots if (c := ctx.claims.get(other.id)) is not None
           and c.call == claim.call]
    params = {**dict(claim.site.params), **dict(claim.site.notes), "norm": "module"}
    return ops, {"M": m, "N": n}, params, claim.site.aten_op


def residual_add_pattern(kernel_type: str, norm: NormAfterAdd) -> Callable[[Context], None]:
    """The pattern claiming an add and the `norm` it feeds as `kernel_type` calls."""

    def find(ctx: Context) -> None:
        for add in list(ctx.roots):
            if add.id in ctx.claims or not ctx.significant(add):
                continue
            shape = _residual_add(add)
            following = _next_significant(ctx, add) if shape else None
            found = _norm_call(ctx, norm, following, shape) if following else None
            if found is None:
                continue
            norm_ops, named, params, label = found
            views = [op for op in ctx.roots[ctx.position[add.id] + 1:ctx.position[following.id]]
                     if op.id not in ctx.claims]
            ops = [add, *views, *norm_ops]
            site = ctx.site(kernel_type, ctx.common_module(ops), f"aten::add + {label}", named,
                            params, call_dtype(add, ctx.record.dtype))
            ctx.claim(ops, kernel_type, ("residual-add", add.id), site)

    find.__name__ = f"find_add_then_{norm.norm_type}"
    return find
