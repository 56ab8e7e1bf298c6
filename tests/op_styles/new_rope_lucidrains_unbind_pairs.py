"""rotary-embedding-torch's interleaved rotate_half: x.reshape(.., -1, 2).unbind(-1), stack((-x2, x1), -1)
flattened back; t * cos + rotate_half(t) * sin with repeat_interleave'd frequencies."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'interleaved'}, 'calls': 1}

def rotate_half(x):
    x = x.reshape(*x.shape[:-1], -1, 2)
    x1, x2 = x.unbind(dim=-1)
    x = torch.stack((-x2, x1), dim=-1)
    return x.reshape(*x.shape[:-2], -1)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim=16, theta=10000, max_positions=32):
        super().__init__()
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = torch.arange(max_positions).float()
        freqs = torch.einsum("i, j -> i j", t, freqs)
        freqs = freqs.repeat_interleave(2, dim=-1)
        self.register_buffer("cached_freqs", freqs, persistent=False)

    def rotate_queries_or_keys(self, t):
        seq_len = t.shape[-2]
        freqs = self.cached_freqs[:seq_len]
        return t * freqs.cos() + rotate_half(t) * freqs.sin()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary_emb = RotaryEmbedding()

    def forward(self, q):
        return self.rotary_emb.rotate_queries_or_keys(q)


def get_inputs():
    return [torch.randn(2, 4, 12, 16)]
