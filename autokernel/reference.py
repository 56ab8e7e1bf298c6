"""PyTorch references: the correctness oracles for the nine kernel types.

A run's workspace shows this file as `reference.py`. A `kernel.py` must export `kernel_fn` with the
same positional signature as the reference for its KERNEL_TYPE, and return a tensor of the same
shape and dtype.

Conventions:
- Math runs in float32 (float64 when given float64 inputs) and the result is cast back to the input
  dtype, which is what a careful low-precision kernel does. The harness calls these on upcast copies
  of the inputs to get the oracle, so it is never the candidate's rounding that is being compared.
- Weight layouts follow `nn.Linear` (out_features × in_features) where a module owns the weight.
- This file imports only torch, so it can be read and run on its own.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C[..., M, N] = A[..., M, K] @ B[..., K, N], batched like torch.matmul.

    2-D operands are one GEMM (a linear layer's x @ Wᵀ at B = 1); operands with batch dims are
    one GEMM per batch entry, the batch dims broadcast (attention's Q @ Kᵀ and P @ V, bmm).
    """
    ct = _compute_dtype(a)
    return (a.to(ct) @ b.to(ct)).to(a.dtype)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = True,
    scale: float | None = None,
) -> torch.Tensor:
    """O = softmax(Q Kᵀ · scale [+ causal mask]) V for Q, K, V of shape [B, H, S, D].

    `scale` defaults to 1/sqrt(D). The causal mask lets query i attend to keys 0..i (Q and K have
    the same length S). Output has Q's shape and dtype.
    """
    ct = _compute_dtype(q)
    d = q.shape[-1]
    s = scale if scale is not None else 1.0 / math.sqrt(d)
    scores = (q.to(ct) @ k.to(ct).transpose(-1, -2)) * s
    if causal:
        n_q, n_k = scores.shape[-2], scores.shape[-1]
        mask = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v.to(ct)).to(q.dtype)


MLP_ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


def mlp_activation(gate: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """The gated MLP's activation of its gate projection, in gate's dtype: "silu" (SwiGLU),
    "gelu" (GeGLU with the exact erf GELU) or "gelu_tanh" (GeGLU with GELU's tanh form, as in
    Gemma)."""
    if activation == "silu":
        return F.silu(gate)
    if activation == "gelu":
        return F.gelu(gate)
    if activation == "gelu_tanh":
        return F.gelu(gate, approximate="tanh")
    raise ValueError(f"fused_mlp activation {activation!r}: choose one of "
                     f"{', '.join(MLP_ACTIVATIONS)}")


def fused_mlp(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
    activation: str = "silu",
) -> torch.Tensor:
    """Gated MLP: (act(x W_gateᵀ) * (x W_upᵀ)) W_downᵀ, act = `activation` (see
    `mlp_activation`): SwiGLU by default, GeGLU with "gelu" or "gelu_tanh".

    x [M, D]; w_gate, w_up [H, D]; w_down [D, H] (nn.Linear layouts). Output [M, D]. The hidden
    activation is rounded to x's dtype before the down projection, as a real model stores it.
    """
    ct = _compute_dtype(x)
    xc = x.to(ct)
    hidden = mlp_activation(xc @ w_gate.to(ct).t(), activation) * (xc @ w_up.to(ct).t())
    hidden = hidden.to(x.dtype).to(ct)
    return (hidden @ w_down.to(ct).t()).to(x.dtype)


def softmax(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    """Softmax over dim `axis` (the last by default)."""
    return torch.softmax(x.to(_compute_dtype(x)), dim=axis).to(x.dtype)


def layernorm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    """LayerNorm over the last dimension with affine weight and bias of shape [N].

    Rows are shifted by their first element first: layer norm does not change under a per-row
    shift, and it keeps a float32 oracle accurate on rows with a large mean (1e4 + noise), where
    torch's float32 statistics are off by up to 30x the float32 tolerance.
    """
    ct = _compute_dtype(x)
    xc = x.to(ct)
    out = F.layer_norm(xc - xc[..., :1], (x.shape[-1],), weight.to(ct), bias.to(ct), eps)
    return out.to(x.dtype)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
            axis: int = -1) -> torch.Tensor:
    """RMSNorm over dim `axis` (the last by default): x / sqrt(mean(x²) + eps) * weight, weight
    [N] along that dim."""
    ct = _compute_dtype(x)
    xc = x.to(ct)
    rstd = torch.rsqrt(xc.pow(2).mean(dim=axis, keepdim=True) + eps)
    # weight [N] broadcast along `axis`: one trailing 1 per dim after it.
    gain = weight.to(ct).reshape(weight.shape + (1,) * (x.ndim - 1 - axis % x.ndim))
    return (xc * rstd * gain).to(x.dtype)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits [M, V] against int64 targets [M].

    Targets equal to -100 are ignored (F.cross_entropy's default), and the mean runs over the
    others. The loss is returned as a float32 scalar (float64 for float64 logits) whatever the
    logits' dtype: a loss is accumulated in full precision by every training loop.
    """
    ct = _compute_dtype(logits)
    return F.cross_entropy(logits.to(ct), targets, ignore_index=-100, reduction="mean")


def rotary_embedding(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, rotate-half layout (as in LLaMA/HF): x·cos + rotate_half(x)·sin.

    x [B, H, S, D]; cos, sin [S, D] with the two halves of the last dim equal (the HF cache
    layout). rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]).
    """
    ct = _compute_dtype(x)
    xc = x.to(ct)
    half = x.shape[-1] // 2
    rotated = torch.cat((-xc[..., half:], xc[..., :half]), dim=-1)
    return (xc * cos.to(ct) + rotated * sin.to(ct)).to(x.dtype)


def reduce(x: torch.Tensor, axis: int = -1, op: str = "sum") -> torch.Tensor:
    """`op` over dim `axis` (the last by default), in float32, returned in x's dtype: "sum",
    "mean" (the sum divided by N) or "amax" (the largest element; NaN if the row holds one)."""
    xc = x.to(_compute_dtype(x))
    if op == "amax":
        return xc.amax(dim=axis).to(x.dtype)
    if op == "mean":
        return xc.mean(dim=axis).to(x.dtype)
    if op != "sum":
        raise ValueError(f"reduce op {op!r}: choose sum, mean or amax")
    return xc.sum(dim=axis).to(x.dtype)


REFERENCES = {
    "matmul": matmul,
    "flash_attention": flash_attention,
    "fused_mlp": fused_mlp,
    "softmax": softmax,
    "layernorm": layernorm,
    "rmsnorm": rmsnorm,
    "cross_entropy": cross_entropy,
    "rotary_embedding": rotary_embedding,
    "reduce": reduce,
}
