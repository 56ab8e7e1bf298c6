"""A two-layer pre-norm Llama decoder in an nn.ModuleList loop (HF's structure: RMSNorm, q/k/v/o
projections, rotate-half RoPE, SDPA causal, SwiGLU MLP, final norm). The residual adds feeding
the post-attention norms, the second layer's input norm and the final norm are add_rmsnorm (4
calls); the first input norm reads the embeddings alone."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'add_rmsnorm', 'params': {'eps': 1e-06}, 'calls': 4,
            'also': ['rmsnorm', 'matmul', 'flash_attention', 'fused_mlp', 'rotary_embedding']}


class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        shape = (B, T, self.heads, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.input_layernorm = RMSNorm(dim)
        self.self_attn = Attention(dim, heads)
        self.post_attention_layernorm = RMSNorm(dim)
        self.mlp = MLP(dim, hidden)

    def forward(self, hidden_states, cos, sin):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, cos, sin)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class Model(nn.Module):
    def __init__(self, dim=256, heads=4, hidden=688, layers=2, max_len=256):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(dim, heads, hidden) for _ in range(layers)])
        self.norm = RMSNorm(dim)
        head_dim = dim // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(max_len).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x):
        T = x.shape[1]
        cos, sin = self.cos_cached[:T][None, None], self.sin_cached[:T][None, None]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 256)]
