"""The LM head + loss pattern (linear_cross_entropy): an aten::linear whose output the very next
significant op takes as its logits, F.cross_entropy (aten::cross_entropy_loss) or log_softmax
then nll_loss, claimed as ONE call.

A causal LM writes `logits = self.lm_head(h); loss = F.cross_entropy(logits.view(-1, V), t)`,
HF's models with a shift (`logits[..., :-1, :].contiguous()`) and often a `.float()` between.
The profile records no tensor identities, so "the loss's input is the head's output" is read as
"only views, casts and a contiguous copy run between them, the loss's last dim is the head's
output width V, and it has no more rows than the head". The fused call's time is the sum of
the linear's, the copies' and the loss's. The loss's arguments (reduction, ignore_index,
smoothing, class weights) and a bias on the head become notes, which `lm_head_loss_route`
reads to say whether verify can route the site.
"""

from __future__ import annotations

from collections.abc import Mapping

from autokernel.profiling.callsites import (
    CAST_OPS,
    Context,
    SiteKey,
    significant_unclaimed,
    unclaimed_span,
)
from autokernel.profiling.site_readers import (
    arg_shape,
    arg_value,
    call_dtype,
    has_tensor,
    maybe_last_dim,
    shape_numel,
)
from autokernel.profiling.events import ModuleInfo, OpCall
from autokernel.profiling.op_rules import op_rules
from autokernel.profiling.site_routes import CHAIN, unrouted_loss_arguments

KERNEL_TYPE = "linear_cross_entropy"
HEADS = ("aten::linear",)  # nn.Linear and F.linear: what verify defers
BETWEEN = CAST_OPS | {"aten::contiguous", "aten::clone"}  # a shift's copy, a .float()
LOG_SOFTMAXES = ("aten::log_softmax", "aten::_log_softmax")
NLL_LOSSES = ("aten::nll_loss", "aten::nll_loss_nd")
CROSS_ENTROPY = "aten::cross_entropy_loss"


def _next_doing_work(seq: list[OpCall], k: int) -> int:
    while k < len(seq) and seq[k].name in BETWEEN:
        k += 1
    return k


def _loss_ops(seq: list[OpCall], k: int) -> list[OpCall] | None:
    """The loss starting at seq[k]: [cross_entropy_loss] or [log_softmax, nll_loss]."""
    if k >= len(seq):
        return None
    if seq[k].name == CROSS_ENTROPY:
        return [seq[k]]
    if seq[k].name in LOG_SOFTMAXES:
        x = arg_shape(seq[k], 0)
        after = _next_doing_work(seq, k + 1)
        if x and maybe_last_dim(arg_value(seq[k], 1), len(x)) and after < len(seq) and \
                seq[after].name in NLL_LOSSES:
            return [seq[k], seq[after]]
    return None


def find_lm_head_loss(ctx: Context) -> None:
    seq = significant_unclaimed(ctx)
    extract = op_rules()[CROSS_ENTROPY].extract  # cross_entropy's reader of the loss's args
    for j, head in enumerate(seq):
        if head.name not in HEADS:
            continue
        x, w = arg_shape(head, 0), arg_shape(head, 1)
        if len(w) != 2 or not x or x[-1] != w[1]:
            continue
        vocab, width = w
        loss = _loss_ops(seq, _next_doing_work(seq, j + 1))
        if loss is None:
            continue
        logits = arg_shape(loss[0], 0)
        if len(logits) != 2 or logits[-1] != vocab or logits[0] > shape_numel(x[:-1]):
            continue
        extracted = extract(loss[-1], ctx)
        params = dict(extracted[1]) if extracted else {}
        if len(loss) == 2:
            params["loss"] = "log_softmax + nll_loss"
        if has_tensor(head, 2):
            params["bias"] = True
        named = {"N": logits[0], "D": width, "V": vocab}
        label = " + ".join(op.name for op in (head, *loss))
        site = ctx.site(KERNEL_TYPE, ctx.common_module([head, *loss]), label, named, params,
                        call_dtype(head, ctx.record.dtype))
        ctx.claim(unclaimed_span(ctx, head, loss[-1]), KERNEL_TYPE, ("lm_head_loss", head.id), site)


def lm_head_loss_route(site: SiteKey, module_type: str | None,
                       modules: Mapping[str, ModuleInfo]) -> str:
    """linear_cross_entropy's `OpSpec.site_route`: deferred whole (`integrate/logits_chain.py`)
    when the loss is F.cross_entropy's mean over targets not -100 and the head has no bias."""
    notes = dict(site.notes)
    if notes.get("head") == "matmul":
        return "no: the head is h @ W.T, not F.linear"
    if "loss" in notes:
        return f"no: {notes['loss']} (only F.cross_entropy is routed)"
    if notes.get("bias"):
        return "no: the LM head has a bias"
    return unrouted_loss_arguments(notes) or CHAIN
