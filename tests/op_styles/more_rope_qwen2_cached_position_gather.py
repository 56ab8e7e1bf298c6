"""Qwen2 (transformers 4.40) rotary: a cached cos/sin table [max_pos, D] sliced to the sequence,
then `cos[position_ids].unsqueeze(unsqueeze_dim)` gathered per token, and rotate-half on q and k."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'rotate_half'}, 'calls': 2}


class Qwen2RotaryEmbedding(nn.Module):
    def __init__(self, dim=64, max_position_embeddings=128, base=1000000.0):
        super().__init__()
        self.dim = dim
        self.base = base
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(max_position_embeddings, torch.get_default_dtype())

    def _set_cos_sin_cache(self, seq_len, dtype):
        self.max_seq_len_cached = seq_len
        t = torch.arange(self.max_seq_len_cached, dtype=torch.int64).type_as(self.inv_freq)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos().to(dtype), persistent=False)
        self.register_buffer("sin_cached", emb.sin().to(dtype), persistent=False)

    def forward(self, x, seq_len=None):
        return (self.cos_cached[:seq_len].to(dtype=x.dtype),
                self.sin_cached[:seq_len].to(dtype=x.dtype))


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


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary_emb = Qwen2RotaryEmbedding()

    def forward(self, query_states, key_states, position_ids):
        kv_seq_len = key_states.shape[-2]
        cos, sin = self.rotary_emb(key_states, seq_len=kv_seq_len)
        return apply_rotary_pos_emb(query_states, key_states, cos, sin, position_ids)


def get_inputs():
    return [torch.randn(2, 4, 16, 64), torch.randn(2, 2, 16, 64),
            torch.arange(16).unsqueeze(0).expand(2, -1)]
