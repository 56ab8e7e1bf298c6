"""Phi-2's attention RoPE (HF PhiAttention): partial rotary, rotary_ndims = 0.4 · head_dim; q and
k split into `q_rot, q_pass` by slicing, the cached cos/sin gathered by position_ids, rotate-half
on the rotary part, and `torch.cat((q_rot, q_pass), dim=-1)`."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'rotate_half', 'rotary_dim': 32},
            'calls': 2}


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


class PhiRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=64, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        t = torch.arange(max_position_embeddings, dtype=torch.int64).type_as(inv_freq)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x, seq_len):
        return self.cos_cached[:seq_len].to(x.dtype), self.sin_cached[:seq_len].to(x.dtype)


class PhiAttention(nn.Module):
    def __init__(self, head_dim=80, partial_rotary_factor=0.4):
        super().__init__()
        self.rotary_ndims = int(partial_rotary_factor * head_dim)
        self.rotary_emb = PhiRotaryEmbedding(self.rotary_ndims)

    def forward(self, query_states, key_states, position_ids):
        cos, sin = self.rotary_emb(key_states, seq_len=key_states.shape[-2])
        query_rot, query_pass = (query_states[..., : self.rotary_ndims],
                                 query_states[..., self.rotary_ndims :])
        key_rot, key_pass = key_states[..., : self.rotary_ndims], key_states[..., self.rotary_ndims :]
        query_rot, key_rot = apply_rotary_pos_emb(query_rot, key_rot, cos, sin, position_ids)
        query_states = torch.cat((query_rot, query_pass), dim=-1)
        key_states = torch.cat((key_rot, key_pass), dim=-1)
        return query_states, key_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = PhiAttention()

    def forward(self, q, k):
        position_ids = torch.arange(q.shape[2]).unsqueeze(0)
        return self.self_attn(q, k, position_ids)


def get_inputs():
    return [torch.randn(2, 4, 12, 80), torch.randn(2, 4, 12, 80)]
