"""cross_entropy: mean cross-entropy of logits [M, V] against int64 targets [M].

Targets equal to IGNORE_INDEX (-100) contribute nothing, and the mean runs over the other rows;
the loss is a float32 scalar whatever the logits' dtype (see `reference.cross_entropy`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from autokernel import reference
from autokernel.integrate.custom_ops import saved_inputs
from autokernel.integrate.integration import CallRoute, Integration, Plan
from autokernel.integrate.routing import Outcome, RoutedKernel, RouteStats
from autokernel.integrate.route_helpers import REQUIRED, bind_arguments, call_refusal, kernel_caller
from autokernel.integrate.plans import argument_runner
from autokernel.ops.spec import (
    AdversarialCase, AtenRule, Inputs, OpSpec, Shape, element_size, sample,
)
from autokernel.profiling.callsites import (
    CAST_OPS,
    Context,
    Extracted,
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
from autokernel.profiling.graph_losses import find_cross_entropy, loss_notes_route
from autokernel.profiling.site_routes import CALL, unrouted_loss_arguments

DIMS = ("M", "V")
IGNORE_INDEX = -100


def stock_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # F.cross_entropy returns the loss in the logits' dtype; the reference's loss is float32.
    loss_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX).to(loss_dtype)


def _targets(shape: Shape, device: str | torch.device, generator: torch.Generator) -> torch.Tensor:
    m, v = shape
    return torch.randint(0, v, (m,), generator=generator, device=device, dtype=torch.int64)


def make_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    # The loss is a float32 scalar, finite for any finite logits; 1e3 keeps 7-sigma draws inside
    # fp16's range while making every row's loss a few thousand (no max subtraction → overflow).
    logits = sample(shape, dtype, device, generator, distribution, large_scale=1e3)
    return logits, _targets(shape, device, generator)


def flops(shape: Shape) -> float:
    # 4 per logit: max-compare, subtract the running max, exp, add to the row sum. The per-row
    # log, target gather and the mean are O(M) and not counted.
    m, v = shape
    return 4.0 * m * v


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    m, v = shape
    # logits read once, int64 targets read once, one float32 loss written.
    return m * v * element_size(dtype) + 8.0 * m + 4.0


def _extreme_logits(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    # Uniform in ±3e4: exp() overflows even in float64 unless the row max is subtracted, and
    # 3e4 is still inside fp16's range (max 65504).
    logits = sample(shape, torch.float32, device, generator, "uniform") * 3.0e4
    return logits.to(dtype), _targets(shape, device, generator)


def _dominant_logit(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, v = shape
    logits = sample(shape, torch.float32, device, generator, "normal")
    hot = torch.randint(0, v, (m,), generator=generator, device=device)
    rows = torch.arange(m, device=device)
    # +100 overflows exp() in float32 without the max subtraction, yet keeps float32 rounding
    # of the row's logsumexp (about 1e-5) well inside the fp32 tolerance.
    logits[rows, hot] += 100.0
    targets = _targets(shape, device, generator)
    # Even rows aim at their dominant logit (loss ~0), odd rows elsewhere (loss ~100).
    targets = torch.where(rows % 2 == 0, hot, targets)
    return logits.to(dtype), targets


def _equal_logits(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, v = shape
    # One negative constant per row, so the answer is exactly log(V); a masked load padding with
    # 0 instead of -inf would make the padding the row max.
    level = -1.0 - 8.0 * torch.rand((m, 1), generator=generator, device=device)
    logits = level.expand(m, v).to(dtype).contiguous()
    return logits, _targets(shape, device, generator)


def _ignored_targets(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, _ = shape
    logits = sample(shape, dtype, device, generator, "normal")
    targets = _targets(shape, device, generator)
    ignored = torch.rand((m,), generator=generator, device=device) < 0.4
    ignored[0] = False  # never every row ignored: that mean is 0/0 = NaN
    return logits, targets.masked_fill(ignored, IGNORE_INDEX)


def _boundary_targets(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, v = shape
    logits = sample(shape, dtype, device, generator, "normal")
    rows = torch.arange(m, device=device)
    targets = torch.where(rows % 2 == 0, 0, v - 1).to(torch.int64)
    return logits, targets


def _masked_vocab(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, v = shape
    logits = sample(shape, torch.float32, device, generator, "normal")
    masked = torch.rand(shape, generator=generator, device=device) < 0.3
    # Every other row is -inf over its first half too, so a whole leading block of a long row is
    # -inf: the online logsumexp trap exp(-inf - (-inf)) = NaN.
    masked[::2, : v // 2] = True
    targets = torch.randint(v // 2, v, (m,), generator=generator, device=device)
    masked[torch.arange(m, device=device), targets] = False  # a -inf target would be an inf loss
    return logits.masked_fill(masked, float("-inf")).to(dtype), targets


ADVERSARIAL = (
    AdversarialCase(
        "extreme_logits",
        "logits uniform in ±3e4: exp() overflows (even in float64) unless the row max is "
        "subtracted; losses are tens of thousands",
        _extreme_logits,
    ),
    AdversarialCase(
        "dominant_logit",
        "one logit per row 100 above normal noise (exp overflows float32 without the max); even "
        "rows target it (loss ~0, tests the logsumexp's accuracy), odd rows do not",
        _dominant_logit,
    ),
    AdversarialCase(
        "equal_logits",
        "each row one negative constant: loss exactly log(V); catches masked lanes padded with 0 "
        "instead of -inf, and tie handling of the max",
        _equal_logits,
    ),
    AdversarialCase(
        "ignored_targets",
        "about 40% of targets are -100 (never all): they must add nothing to the sum, never be "
        "gathered (out of bounds), and not count in the mean's denominator",
        _ignored_targets,
    ),
    AdversarialCase(
        "boundary_targets",
        "targets alternate 0 and V-1: off-by-one in the gather, and the last partial block",
        _boundary_targets,
    ),
    AdversarialCase(
        "masked_vocab",
        "30% of logits -inf, and every other row -inf over its first half (targets finite): "
        "catches exp(-inf - (-inf)) = NaN in an online logsumexp's first blocks",
        _masked_vocab,
    ),
)


def liger_cross_entropy() -> Callable[..., torch.Tensor] | None:
    """Liger's cross-entropy forward (no gradient: the logits do not require one)."""
    try:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
    except ImportError:
        return None

    def run(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return LigerCrossEntropyFunction.apply(logits, targets, None, IGNORE_INDEX)[0]

    return run


def _cross_entropy_shape(op: OpCall, ctx: Context) -> Extracted:
    x = arg_shape(op, 0)
    if not x:
        return None
    v = x[1] if len(x) >= 2 else x[0]
    params: dict[str, Any] = {}
    reduction = arg_value(op, 3)
    if isinstance(reduction, int):
        params["reduction"] = {0: "none", 1: "mean", 2: "sum"}.get(reduction, reduction)
    ignore_index = arg_value(op, 4)
    if isinstance(ignore_index, int):
        params["ignore_index"] = ignore_index
    smoothing = arg_value(op, 5)
    if isinstance(smoothing, float) and smoothing:
        params["label_smoothing"] = smoothing
    if has_tensor(op, 2):
        params["class_weights"] = True
    return {"M": shape_numel(x) // v, "V": v}, params


def _find_log_softmax_nll(ctx: Context) -> None:
    seq = significant_unclaimed(ctx)
    for j, log_softmax in enumerate(seq):
        if log_softmax.name not in ("aten::log_softmax", "aten::_log_softmax"):
            continue
        x = arg_shape(log_softmax, 0)
        if not x or not maybe_last_dim(arg_value(log_softmax, 1), len(x)):
            continue
        k = j + 1
        while k < len(seq) and seq[k].name in CAST_OPS:
            k += 1
        if k >= len(seq) or seq[k].name not in ("aten::nll_loss", "aten::nll_loss_nd"):
            continue
        nll = seq[k]
        logits = arg_shape(nll, 0)
        if shape_numel(logits) != shape_numel(x) or (logits and logits[-1] != x[-1]):
            continue
        extracted = _cross_entropy_shape(nll, ctx)
        if extracted is None:
            continue
        named, params = extracted
        site = ctx.site("cross_entropy", ctx.common_module([log_softmax, nll]),
                        f"{log_softmax.name} + {nll.name}", named, params,
                        call_dtype(log_softmax, ctx.record.dtype))
        ctx.claim(unclaimed_span(ctx, log_softmax, nll), "cross_entropy", ("ce", log_softmax.id),
                  site)


def _site_route(site: SiteKey, module_type: str | None, modules: Mapping[str, ModuleInfo]) -> str:
    """F.cross_entropy is intercepted when the kernels take its arguments; log_softmax then
    nll_loss is not routed."""
    why = loss_notes_route(dict(site.notes))
    if why:
        return why
    if site.aten_op != "aten::cross_entropy_loss":
        return "no: log_softmax + nll_loss (only F.cross_entropy is routed)"
    return unrouted_loss_arguments(dict(site.notes)) or CALL


SPEC = OpSpec(
    name="cross_entropy",
    dims=DIMS,
    reference=reference.cross_entropy,
    stock=stock_cross_entropy,
    liger=liger_cross_entropy,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=False,
    smoke_shape=(8, 1000),
    sweep=(
        (4096, 32000),  # LLaMA-2 vocab
        (8192, 50257),  # GPT-2 vocab (odd)
        (4096, 128256),  # LLaMA-3 vocab
        (1024, 32000),
        (16384, 32000),
        (4096, 50304),  # GPT-2 vocab padded to a multiple of 64
        (2048, 151936),  # Qwen-2 vocab
        (512, 256000),  # Gemma vocab
        (8192, 32768),
    ),
    cpu_sweep=(
        (1, 37),
        (4, 1000),
        (16, 2500),
        (33, 777),
        (64, 128),
        (3, 9001),  # longer than the starter's default block: exercises the online loop
        (2, 20000),
    ),
    edge_shapes=((1023, 32000), (4097, 1537), (1, 128256), (4096, 1), (1537, 4097)),
    cpu_edge_shapes=((1, 1), (5, 1), (1, 3001), (17, 1023), (9, 1537)),
    bench_shapes=((4096, 32000), (8192, 50257), (4096, 128256)),
    adversarial=ADVERSARIAL,
    aten_ops={"aten::cross_entropy_loss": AtenRule(_cross_entropy_shape)},
    # Defaults: the candidate's loss is float32 whatever the logits' dtype, but stock
    # F.cross_entropy rounds its loss to fp16/bf16 (relative 2^-11 / 2^-8), so the half-precision
    # tolerances stay at the defaults that both must meet.
    patterns=(_find_log_softmax_nll,),
    graph_patterns=(find_cross_entropy,),
    site_route=_site_route,
    notes="mean over rows whose target is not -100, returned as a float32 scalar; "
    "FLOPs = 4·M·V (max, subtract, exp, sum); bytes = read logits + int64 targets, write 4 B.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


IGNORE_INDEX = -100  # F.cross_entropy's default, which the cross_entropy kernel implements


def _loss_dtype(logits: torch.Tensor) -> torch.dtype:
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def _fake_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return logits.new_empty((), dtype=_loss_dtype(logits))


def _cross_entropy_gradient(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    (logits, targets), _ = saved_inputs(ctx)
    if not ctx.needs_input_grad[0]:
        return None, None
    probs = torch.softmax(logits.to(_loss_dtype(logits)), dim=-1)
    valid = targets != IGNORE_INDEX
    rows = torch.arange(targets.shape[0], device=targets.device)
    probs[rows[valid], targets[valid]] -= 1.0
    probs[~valid] = 0.0
    # The mean runs over the rows that are not ignored (0/0 = nan when all are, as in PyTorch).
    scale = grad.to(probs.dtype) / valid.sum().to(probs.dtype)
    return (probs * scale).to(logits.dtype), None


CROSS_ENTROPY_ARGUMENTS = ("input", "target", "weight", "size_average", "ignore_index", "reduce",
                           "reduction", "label_smoothing")
CROSS_ENTROPY_DEFAULTS = (REQUIRED, REQUIRED, None, None, -100, None, "mean", 0.0)


def _plan_cross_entropy(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                        kwargs: Mapping[str, Any], _stats: RouteStats) -> Plan:
    bound = bind_arguments(args, kwargs, CROSS_ENTROPY_ARGUMENTS, CROSS_ENTROPY_DEFAULTS)
    if bound is None:
        return "arguments"
    logits, targets = bound["input"], bound["target"]
    if bound["weight"] is not None or bound["size_average"] is not None or \
            bound["reduce"] is not None or bound["label_smoothing"] != 0.0:
        return "weight, smoothing or legacy arguments"
    if bound["ignore_index"] != -100 or bound["reduction"] != "mean":
        return "ignore_index or reduction"
    if not (isinstance(logits, torch.Tensor) and isinstance(targets, torch.Tensor)) or \
            logits.ndim != 2 or targets.ndim != 1 or targets.dtype != torch.int64 or \
            targets.shape[0] != logits.shape[0]:
        return "shape"
    why = call_refusal(kernel, logits)
    if why:
        return why
    call, dtype = kernel_caller(kernel, logits, targets), logits.dtype
    run = argument_runner(call, CROSS_ENTROPY_ARGUMENTS, args, ("input", "target"))
    if dtype == _loss_dtype(logits):
        return run

    def run_cast(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Outcome:
        out, why = run(args, kwargs)
        # F.cross_entropy returns the logits' dtype; the kernel's float32 loss is cast to match
        # (by keyword: `.to(dtype)` by position first tries the device overloads, ~1 µs more).
        return (None, why) if why else (out.to(dtype=dtype), None)

    return run_cast


INTEGRATION = Integration(
    schema="(Tensor logits, Tensor targets) -> Tensor",
    fake=_fake_cross_entropy,
    backward="analytic",
    gradient=_cross_entropy_gradient,
    call_routes={"": (CallRoute((F.cross_entropy,), plan=_plan_cross_entropy),)},
    example=lambda dtype: (torch.empty(64, 128, dtype=dtype), torch.zeros(64, dtype=torch.long)),
)
