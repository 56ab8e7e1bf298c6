"""A Mistral-style decoder block stack: RMSNorm, rotate-half RoPE, GQA attention, SwiGLU MLP.

KernelBench convention: `Model`, `get_inputs()`, `get_init_inputs()`.

Models the decoder layers of a Mistral-7B-like network at a smaller width, without the embedding
and the output head: pre-norm blocks with a hand-written RMSNorm (computed in float32), rotary
embeddings applied by a plain function `rope(x, cos, sin)` (rotate-half layout, `torch.cat((-x2,
x1))`, no rotary module), grouped-query attention (8 KV heads shared by 16 query heads, repeated
as Mistral's reference code does, then causal `F.scaled_dot_product_attention`) and a bias-free
SwiGLU MLP. Mistral's 4096-token sliding window never binds at this sequence length, so
attention is plain causal.

Sizes (`CONFIG`): hidden 2048, 16 heads of 128 (8 KV heads), MLP 5632, 2 layers; input hidden
states [1, 2048 tokens, 2048]. About 94 M parameters: 190 MB in fp16. `TINY` (hidden 64, 4 heads
of 16, 2 KV heads) is the same model at CPU-test size: build it with `init_inputs_for(TINY)` and
`inputs_for(TINY, batch, seq_len)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class MistralConfig:
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden: int  # SwiGLU inner width
    max_seq_len: int = 4096
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5


CONFIG = MistralConfig(d_model=2048, n_layers=2, n_heads=16, n_kv_heads=8, hidden=5632)
TINY = MistralConfig(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden=176,
                     max_seq_len=64)
BATCH = 1
SEQ_LEN = 2048


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # float32 whatever the model's dtype: a half-precision mean of squares overflows.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE of x [B, H, S, D] with cos/sin tables [S, D]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def repeat_kv(x: torch.Tensor, times: int) -> torch.Tensor:
    """[B, H_kv, S, D] → [B, H_kv * times, S, D], each KV head serving `times` query heads."""
    if times == 1:
        return x
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, times, s, d).reshape(b, h * times, s, d)


class Attention(nn.Module):
    def __init__(self, cfg: MistralConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.n_kv_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.q_proj = nn.Linear(cfg.d_model, cfg.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * self.head_dim, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        repeat = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, repeat), repeat_kv(v, repeat)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, hidden, bias=False)
        self.up_proj = nn.Linear(d_model, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: MistralConfig) -> None:
        super().__init__()
        self.input_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.post_attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg.d_model, cfg.hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), cos, sin)
        return x + self.mlp(self.post_attention_norm(x))


class Model(nn.Module):
    """Hidden states [B, S, d_model] → hidden states [B, S, d_model] after the layers and a norm."""

    def __init__(self, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int, hidden: int,
                 max_seq_len: int = 4096, rope_theta: float = 10000.0,
                 norm_eps: float = 1e-5) -> None:
        super().__init__()
        cfg = MistralConfig(d_model, n_layers, n_heads, n_kv_heads, hidden, max_seq_len,
                            rope_theta, norm_eps)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        head_dim = d_model // n_heads
        inv_freq = 1.0 / (rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_seq_len).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq_len = x.shape[1]
        cos, sin = self.cos[:seq_len], self.sin[:seq_len]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


def init_inputs_for(cfg: MistralConfig) -> list:
    return [cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.hidden, cfg.max_seq_len,
            cfg.rope_theta, cfg.norm_eps]


def inputs_for(cfg: MistralConfig, batch: int, seq_len: int) -> list:
    return [torch.randn(batch, seq_len, cfg.d_model)]


def get_inputs() -> list:
    return inputs_for(CONFIG, BATCH, SEQ_LEN)


def get_init_inputs() -> list:
    return init_inputs_for(CONFIG)
