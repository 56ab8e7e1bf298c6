"""A GPT-2-style transformer block whose MLP is a lambda over an nn.ModuleDict.

Op families: layernorm, matmul, explicit causal attention, GELU. Pre-norm block on x [16, 1024
tokens, 1024] with 16 heads of 64: LayerNorm → causal self-attention written out (q @ kᵀ · scale,
`masked_fill` with a lower-triangular buffer compared to 0 at run time, softmax, @ v) → residual;
LayerNorm → MLP (Linear 1024→4096, tanh-approximated GELU written out, Linear 4096→1024) →
residual. As in minGPT, the MLP's forward is `self.mlpf`, a lambda closed over the ModuleDict
that holds its layers: a copy of the model (`copy.deepcopy`) shares the lambda, so its MLP still
calls the ORIGINAL model's layers. That is the trap this problem sets for anything that
copies, casts or patches a model (verify deep-copies it for the oracle and the patched model).

What autokernel sees: the `== 0` comparison between the scores and the softmax keeps the profiler
from claiming the attention as one flash_attention call, so the targets are matmul (the
projections, role "linear", routed per module, and the two batched attention products, role
"batched", routed per call),
softmax over the [16·16·1024, 1024] scores, and layernorm; the GELU and the masking stay "other".
"""

import math

import torch
from torch import nn

BATCH, SEQ_LEN, D_MODEL, HEADS = 16, 1024, 1024, 16


class TanhGELU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, max_seq_len: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        lower = torch.tril(torch.ones(max_seq_len, max_seq_len))
        self.register_buffer("lower", lower.view(1, 1, max_seq_len, max_seq_len))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))
        scores = scores.masked_fill(self.lower[:, :, :t, :t] == 0, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).contiguous().view(b, t, d))


class Model(nn.Module):
    def __init__(self, d_model: int = D_MODEL, heads: int = HEADS,
                 max_seq_len: int = SEQ_LEN) -> None:
        super().__init__()
        self.norm_attn = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, max_seq_len)
        self.norm_mlp = nn.LayerNorm(d_model)
        self.mlp = nn.ModuleDict({
            "fc": nn.Linear(d_model, 4 * d_model),
            "act": TanhGELU(),
            "proj": nn.Linear(4 * d_model, d_model),
        })
        layers = self.mlp
        self.mlpf = lambda x: layers["proj"](layers["act"](layers["fc"](x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm_attn(x))
        return x + self.mlpf(self.norm_mlp(x))


def get_inputs() -> list:
    return [torch.randn(BATCH, SEQ_LEN, D_MODEL)]


def get_init_inputs() -> list:
    return [D_MODEL, HEADS, SEQ_LEN]
