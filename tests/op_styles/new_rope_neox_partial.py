"""GPT-NeoX partial rotary: rotate_half RoPE on the first rotary_ndims (8) of head_dim 16, the rest
passed through and concatenated back, on q and k."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'rotate_half', 'rotary_dim': 8}, 'calls': 2, 'route': 'no'}

def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class GPTNeoXRotary(nn.Module):
    def __init__(self, head_size=16, rotary_pct=0.5, base=10000, max_positions=32):
        super().__init__()
        self.rotary_ndims = int(head_size * rotary_pct)
        inv_freq = 1.0 / (base ** (torch.arange(0, self.rotary_ndims, 2).float() / self.rotary_ndims))
        t = torch.arange(max_positions).float()
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, query, key):
        seq_len = query.shape[-2]
        cos = self.cos_cached[:seq_len][None, None]
        sin = self.sin_cached[:seq_len][None, None]
        query_rot = query[..., : self.rotary_ndims]
        query_pass = query[..., self.rotary_ndims:]
        key_rot = key[..., : self.rotary_ndims]
        key_pass = key[..., self.rotary_ndims:]
        q_embed = (query_rot * cos) + (rotate_half(query_rot) * sin)
        k_embed = (key_rot * cos) + (rotate_half(key_rot) * sin)
        query = torch.cat((q_embed, query_pass), dim=-1)
        key = torch.cat((k_embed, key_pass), dim=-1)
        return query, key


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary = GPTNeoXRotary()

    def forward(self, q, k):
        return self.rotary(q, k)


def get_inputs():
    return [torch.randn(2, 4, 12, 16), torch.randn(2, 4, 12, 16)]
