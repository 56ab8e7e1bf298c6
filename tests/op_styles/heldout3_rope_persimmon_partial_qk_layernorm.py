"""Persimmon's attention front (HF PersimmonAttention): a fused query_key_value projection split
per head ([B, S, H, 3, D] unbound on dim 3), per-head LayerNorms on q and k (qk_layernorm, over
head_dim), transposed to [B, H, S, D], then partial rotary (partial_rotary_factor 0.5): the first
rotary_ndims (8 of 16) get rotate_half RoPE with cos/sin gathered by position_ids from constant
tables, the rest is passed through and concatenated back."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'rotate_half', 'rotary_dim': 8},
            'calls': 2, 'also': ['layernorm', 'matmul']}


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids, unsqueeze_dim=1):
    cos = cos[position_ids].unsqueeze(unsqueeze_dim)
    sin = sin[position_ids].unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class PersimmonRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=64, base=25000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_position_embeddings).float()
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, seq_len):
        return self.cos_cached[:seq_len], self.sin_cached[:seq_len]


class PersimmonAttention(nn.Module):
    def __init__(self, hidden_size=64, num_heads=4, partial_rotary_factor=0.5):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.rotary_ndims = int(self.head_dim * partial_rotary_factor)
        self.query_key_value = nn.Linear(hidden_size, 3 * hidden_size, bias=True)
        self.q_layernorm = nn.LayerNorm(self.head_dim, eps=1e-5, elementwise_affine=True)
        self.k_layernorm = nn.LayerNorm(self.head_dim, eps=1e-5, elementwise_affine=True)
        self.rotary_emb = PersimmonRotaryEmbedding(self.rotary_ndims)

    def forward(self, hidden_states, position_ids):
        bsz, q_len, _ = hidden_states.size()
        fused_qkv = self.query_key_value(hidden_states)
        fused_qkv = fused_qkv.view(bsz, q_len, self.num_heads, 3, self.head_dim)
        query_states, key_states, value_states = fused_qkv[..., 0, :], fused_qkv[..., 1, :], fused_qkv[..., 2, :]
        query_states = self.q_layernorm(query_states)
        key_states = self.k_layernorm(key_states)
        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        cos, sin = self.rotary_emb(q_len)
        query_rot, query_pass = query_states[..., : self.rotary_ndims], query_states[..., self.rotary_ndims :]
        key_rot, key_pass = key_states[..., : self.rotary_ndims], key_states[..., self.rotary_ndims :]
        query_rot, key_rot = apply_rotary_pos_emb(query_rot, key_rot, cos, sin, position_ids)
        query_states = torch.cat((query_rot, query_pass), dim=-1)
        key_states = torch.cat((key_rot, key_pass), dim=-1)
        return query_states, key_states, value_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = PersimmonAttention()

    def forward(self, hidden_states):
        position_ids = torch.arange(hidden_states.shape[1]).unsqueeze(0)
        return self.self_attn(hidden_states, position_ids)


def get_inputs():
    return [torch.randn(2, 8, 64)]
