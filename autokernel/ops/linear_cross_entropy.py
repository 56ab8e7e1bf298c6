"""linear_cross_entropy: an LM head and its loss in one call, never holding the [N, V] logits.

loss = F.cross_entropy(hidden @ weightᵀ, targets, ignore_index=-100, reduction="mean") for
hidden [N, D], weight [V, D] (an nn.Linear LM head's, without bias) and int64 targets [N]. The
loss is a float32 scalar whatever the inputs' dtype (float64 for float64 inputs), like
`cross_entropy`'s. Eager PyTorch writes N·V logits (N = 4096 tokens at V = 128256 is 1 GiB in
bf16, 2 GiB more for the float32 softmax of the backward); a fused kernel walks V in blocks per
block of rows, keeping an online logsumexp and the target's logit, so it needs O(N) floats
beyond its inputs. Liger-Kernel's fused linear cross-entropy is the open-source reference point.

The profiler claims an LM head's linear and the cross-entropy of its output as one call
(`profiling/lm_head_loss.py`); verify defers the head's output inside the target's modules and
runs the kernel when it reaches F.cross_entropy (`integrate/logits_chain.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from autokernel.integrate.custom_ops import saved_inputs
from autokernel.integrate.integration import CallRoute, Integration
from autokernel.integrate.logits_chain import LINEARS, defer_linear, is_lm_head
from autokernel.ops.spec import AdversarialCase, Inputs, OpSpec, Shape, element_size, sample
from autokernel.profiling.graph_losses import find_lm_head_loss as find_lm_head_loss_in_graph
from autokernel.profiling.lm_head_loss import find_lm_head_loss, lm_head_loss_route

DIMS = ("N", "D", "V")
IGNORE_INDEX = -100


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor,
                         targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the logits hidden [N, D] @ weight [V, D]ᵀ against int64 targets [N].

    The product and the loss run in float32 (float64 for float64 inputs) from the inputs as
    given: the oracle materializes the logits, a kernel need not. Targets equal to -100 are
    ignored and the mean runs over the others (NaN when every one is, as in PyTorch).
    """
    compute = torch.float64 if hidden.dtype == torch.float64 else torch.float32
    logits = F.linear(hidden.to(compute), weight.to(compute))
    return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="mean")


def stock_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor,
                               targets: torch.Tensor) -> torch.Tensor:
    """What a model runs unfused: the logits in the inputs' dtype, then F.cross_entropy."""
    loss = F.cross_entropy(F.linear(hidden, weight), targets, ignore_index=IGNORE_INDEX)
    return loss.to(torch.float64 if hidden.dtype == torch.float64 else torch.float32)


def liger_linear_cross_entropy() -> Callable[..., torch.Tensor] | None:
    """Liger's fused linear cross-entropy (its loss module, whose forward is stable across
    releases: (weight, hidden, targets)); None when liger-kernel is not installed."""
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except ImportError:
        return None
    loss_module = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX)

    def run(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        out = loss_module(weight, hidden, targets)
        return out[0] if isinstance(out, tuple) else out

    return run


# Inputs: weights scaled like an initialised head's (1/sqrt(D)), so the logits are O(1) (or
# O(LARGE_SCALE) for "large") at every width.
LARGE_SCALE = 30.0


def _targets(n: int, v: int, device: str | torch.device, generator: torch.Generator,
             ignored: float = 0.1) -> torch.Tensor:
    targets = torch.randint(0, v, (n,), generator=generator, device=device, dtype=torch.int64)
    # Padding positions are ignored in every real batch; never all of them (0/0 = NaN).
    dropped = torch.rand((n,), generator=generator, device=device) < ignored
    dropped[0] = False
    return targets.masked_fill(dropped, IGNORE_INDEX)


def _head(v: int, d: int, device: str | torch.device, generator: torch.Generator,
          distribution: str) -> torch.Tensor:
    w = sample((v, d), torch.float32, device, generator,
               "normal" if distribution == "large" else distribution)
    return w / math.sqrt(d)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                generator: torch.Generator, distribution: str = "normal") -> Inputs:
    n, d, v = shape
    hidden = sample((n, d), torch.float32, device, generator, distribution,
                    large_scale=LARGE_SCALE)
    weight = _head(v, d, device, generator, distribution)
    return hidden.to(dtype), weight.to(dtype), _targets(n, v, device, generator)


def flops(shape: Shape) -> float:
    # The GEMM's N·D·V multiply-adds, plus 4 per logit for the online logsumexp (max, subtract,
    # exp, add), as `cross_entropy` counts them.
    n, d, v = shape
    return 2.0 * n * d * v + 4.0 * n * v


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    # hidden and the head read once, int64 targets read once, and N float32 row losses written
    # and read back by the mean: never the N·V logits.
    n, d, v = shape
    return (n * d + v * d) * element_size(dtype) + 8.0 * n + 2 * 4.0 * n + 4.0


def _huge_logits(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                 generator: torch.Generator, distribution: str = "normal") -> Inputs:
    n, d, v = shape
    # Logits ~ ±1e4: exp() overflows even in float64 unless the running max is subtracted.
    # hidden ≤ 1.7e4 stays inside fp16's 65504; the products are summed in float32.
    hidden = sample((n, d), torch.float32, device, generator, "uniform") * 1.7e4
    return hidden.to(dtype), _head(v, d, device, generator, "normal").to(dtype), \
        _targets(n, v, device, generator)


def _many_ignored(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                  generator: torch.Generator, distribution: str = "normal") -> Inputs:
    n, d, v = shape
    hidden, weight, _ = make_inputs(shape, dtype, device, generator)
    return hidden, weight, _targets(n, v, device, generator, ignored=0.6)


def _boundary_targets(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                      generator: torch.Generator, distribution: str = "normal") -> Inputs:
    n, _, v = shape
    hidden, weight, _ = make_inputs(shape, dtype, device, generator)
    rows = torch.arange(n, device=device)
    return hidden, weight, torch.where(rows % 2 == 0, 0, v - 1).to(torch.int64)


def _single_row(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                generator: torch.Generator, distribution: str = "normal") -> Inputs:
    _, d, v = shape
    hidden, weight, targets = make_inputs((1, d, v), dtype, device, generator)
    return hidden, weight, targets.clamp(min=0)


def _ragged_widths(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                   generator: torch.Generator, distribution: str = "normal") -> Inputs:
    n, d, v = shape
    return make_inputs((n + 1, d + 3, v + 5), dtype, device, generator)


def _strided_hidden(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                    generator: torch.Generator, distribution: str = "normal") -> Inputs:
    n, d, v = shape
    hidden, weight, targets = make_inputs((n, 2 * d, v), dtype, device, generator)
    # A column slice (row stride 2D), as a hidden state cut out of a wider tensor is.
    return hidden[:, d:], weight[:, :d].contiguous(), targets


ADVERSARIAL = (
    AdversarialCase("huge_logits", "logits ~ ±1e4: exp() overflows (even in float64) unless the "
                    "running max is subtracted; losses in the thousands", _huge_logits),
    AdversarialCase("many_ignored", "about 60% of targets -100 (never all): they add nothing, are "
                    "never gathered, and leave the mean's denominator", _many_ignored),
    AdversarialCase("boundary_targets", "targets alternate 0 and V-1: the first column of the "
                    "first block and the last of a partial one", _boundary_targets),
    AdversarialCase("single_row", "N = 1: one row against the whole head, its row block almost "
                    "all masked", _single_row),
    AdversarialCase("ragged_widths", "N + 1, D + 3 and V + 5: no dim a multiple of any block "
                    "(masks on the K loop and the vocabulary loop)", _ragged_widths),
    AdversarialCase("strided_hidden", "hidden a column slice with row stride 2D: breaks kernels "
                    "that assume a contiguous hidden state", _strided_hidden),
)


SPEC = OpSpec(
    name="linear_cross_entropy",
    dims=DIMS,
    reference=linear_cross_entropy,
    stock=stock_linear_cross_entropy,
    liger=liger_linear_cross_entropy,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=True,
    smoke_shape=(8, 32, 100),
    sweep=(
        (4096, 2048, 32000),    # LLaMA-2 vocab, 1B-class width
        (4096, 4096, 32000),    # LLaMA-2-7B
        (4096, 2048, 128256),   # LLaMA-3.2-1B
        (4096, 4096, 128256),   # LLaMA-3-8B
        (8192, 768, 50257),     # GPT-2 (odd vocab)
        (2048, 3584, 152064),   # Qwen-2-7B
        (1024, 2048, 256000),   # Gemma vocab
        (16384, 2048, 32000),
        (512, 4096, 32000),
    ),
    cpu_sweep=(
        (8, 32, 100),
        (1, 16, 37),
        (17, 24, 130),
        (33, 40, 64),
        (4, 64, 300),
    ),
    edge_shapes=((1, 2048, 32000), (4097, 2047, 32003), (1023, 4096, 1), (2048, 1, 32000)),
    cpu_edge_shapes=((1, 1, 1), (5, 1, 17), (3, 17, 1), (19, 33, 65)),
    bench_shapes=((4096, 2048, 32000), (4096, 2048, 128256), (8192, 4096, 128256)),
    adversarial=ADVERSARIAL,
    patterns=(find_lm_head_loss,),
    graph_patterns=(find_lm_head_loss_in_graph,),
    site_route=lm_head_loss_route,
    # Defaults: a kernel sums the products in float32 as the oracle does, from the same rounded
    # inputs; the stock path rounds its logits and loss to fp16/bf16 and still meets them.
    notes="hidden [N, D] @ weight [V, D]ᵀ, then the mean cross-entropy over targets that are "
    "not -100, as a float32 scalar; FLOPs = 2·N·D·V + 4·N·V (GEMM, then max/subtract/exp/sum); "
    "bytes = hidden + weight + int64 targets + N float32 row losses: never the N·V logits.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


LOSS_IGNORED = -100  # F.cross_entropy's default ignore_index, the one the kernel implements


def _loss_dtype(hidden: torch.Tensor) -> torch.dtype:
    return torch.float64 if hidden.dtype == torch.float64 else torch.float32


def _fake_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor,
                               targets: torch.Tensor) -> torch.Tensor:
    return hidden.new_empty((), dtype=_loss_dtype(hidden))


def _gradient_rows(n_rows: int, width: int, vocab: int) -> int:
    """Rows per chunk of the backward: a chunk's logits take about as much memory as the hidden
    state (chunk·V ≈ N·D), so the backward's peak stays O(N·D + V·D), not O(N·V)."""
    per_row = max(1, math.ceil(vocab / max(1, width)))
    return max(1, min(n_rows, math.ceil(n_rows / per_row)))


def _linear_cross_entropy_gradient(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    """d loss / d hidden and d weight, chunk by chunk of rows: each chunk's logits are recomputed
    (in the inputs' dtype, as the eager head computes them), softmaxed in float32, the target's
    one subtracted, and multiplied back; the [N, V] logits never exist at once."""
    (hidden, weight, targets), _ = saved_inputs(ctx)
    wants_hidden, wants_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if not (wants_hidden or wants_weight):
        return None, None, None
    compute = _loss_dtype(hidden)
    kept = targets != LOSS_IGNORED
    # The mean runs over the kept rows (0/0 = NaN when none is, as in PyTorch).
    scale = grad.to(compute) / kept.sum().to(compute)
    grad_hidden = torch.empty_like(hidden) if wants_hidden else None
    grad_weight = torch.zeros(weight.shape, dtype=compute, device=weight.device) \
        if wants_weight else None
    n_rows = hidden.shape[0]
    step = _gradient_rows(n_rows, hidden.shape[1], weight.shape[0])
    for start in range(0, n_rows, step):
        rows = slice(start, min(n_rows, start + step))
        h, t, keep = hidden[rows], targets[rows], kept[rows]
        probs = torch.softmax(F.linear(h, weight).to(compute), dim=-1)
        picked = torch.arange(h.shape[0], device=h.device)[keep]
        probs[picked, t[keep]] -= 1.0
        probs[~keep] = 0.0
        g = (probs * scale).to(hidden.dtype)
        if grad_hidden is not None:
            grad_hidden[rows] = g @ weight
        if grad_weight is not None:
            grad_weight += (g.t() @ h).to(compute)
    return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None


INTEGRATION = Integration(
    schema="(Tensor hidden, Tensor weight, Tensor targets) -> Tensor",
    fake=_fake_linear_cross_entropy,
    backward="analytic",
    gradient=_linear_cross_entropy_gradient,
    # Inside the target's modules an LM head's F.linear is deferred, and the F.cross_entropy it
    # reaches runs the kernel (`logits_chain.py`).
    call_routes={"": (CallRoute(LINEARS, defer_linear),)},
    claims_module=is_lm_head,
    example=lambda dtype: (torch.empty(64, 32, dtype=dtype), torch.empty(100, 32, dtype=dtype),
                           torch.zeros(64, dtype=torch.long)),
)
