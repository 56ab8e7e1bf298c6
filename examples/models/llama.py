"""A LLaMA-style decoder: RMSNorm, rotate-half RoPE, causal SDPA, SwiGLU MLP (no `transformers`).

KernelBench convention: `Model`, `get_inputs()`, `get_init_inputs()`.

The architecture follows Meta's reference implementation: pre-norm blocks with a hand-written
RMSNorm (x * rsqrt(mean(x²) + eps), computed in float32, times a weight), rotary embeddings
applied to q and k in the rotate-half layout, grouped-query attention through
`F.scaled_dot_product_attention(is_causal=True)`, a bias-free SwiGLU MLP
(down(silu(gate(x)) * up(x))) and an untied output head.

Sizes: `CONFIG` selects one of the configurations below; `COMPACT` (4 layers, d=1024) profiles in
seconds, `LLAMA_7B_LAYERS` has LLaMA-7B's layer shapes (d=4096, 32 heads, hidden 11008, vocab
32000) with 2 layers so it fits one GPU. `llama_7b_layers.py` and `tiny_llama.py` next to this
file reuse these classes at those sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden: int  # SwiGLU inner width
    max_seq_len: int = 4096
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5


COMPACT = LlamaConfig(vocab_size=32000, d_model=1024, n_layers=4, n_heads=16, n_kv_heads=16,
                      hidden=2816)
LLAMA_7B_LAYERS = LlamaConfig(vocab_size=32000, d_model=4096, n_layers=2, n_heads=32,
                              n_kv_heads=32, hidden=11008)
TINY = LlamaConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden=176,
                   max_seq_len=128)

CONFIG = COMPACT  # ← LLAMA_7B_LAYERS for 7B layer shapes
BATCH = 1
SEQ_LEN = 512


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In float32 whatever the model's dtype: a half-precision mean of squares overflows.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryEmbedding(nn.Module):
    """Applies RoPE to q and k [B, H, S, Dh] from cached cos/sin tables [max_seq_len, Dh]."""

    def __init__(self, head_dim: int, max_seq_len: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_seq_len).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq_len = q.shape[-2]
        cos, sin = self.cos[:seq_len], self.sin[:seq_len]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return q, k


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.n_kv_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.q_proj = nn.Linear(cfg.d_model, cfg.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * self.head_dim, cfg.d_model, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim, cfg.max_seq_len, cfg.rope_theta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.rotary(q, k)
        if self.n_kv_heads != self.n_heads:
            repeat = self.n_heads // self.n_kv_heads
            k = k.repeat_interleave(repeat, dim=1)
            v = v.repeat_interleave(repeat, dim=1)
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
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg.d_model, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Model(nn.Module):
    """Token ids [B, S] → logits [B, S, vocab]."""

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, n_heads: int,
                 n_kv_heads: int, hidden: int, max_seq_len: int = 4096,
                 rope_theta: float = 10000.0, norm_eps: float = 1e-5) -> None:
        super().__init__()
        cfg = LlamaConfig(vocab_size, d_model, n_layers, n_heads, n_kv_heads, hidden,
                          max_seq_len, rope_theta, norm_eps)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def init_inputs_for(cfg: LlamaConfig) -> list:
    return [cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.hidden,
            cfg.max_seq_len, cfg.rope_theta, cfg.norm_eps]


def inputs_for(cfg: LlamaConfig, batch: int, seq_len: int) -> list:
    return [torch.randint(0, cfg.vocab_size, (batch, seq_len))]


def get_inputs() -> list:
    return inputs_for(CONFIG, BATCH, SEQ_LEN)


def get_init_inputs() -> list:
    return init_inputs_for(CONFIG)
