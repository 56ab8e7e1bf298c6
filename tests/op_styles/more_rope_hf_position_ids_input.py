"""HF LlamaRotaryEmbedding fed the position_ids the model is called with (an int input, as in
generate): freqs = inv_freq[None, :, None] * position_ids[:, None, :].float(), cat, cos/sin per
batch row; rotate-half on q and k. The tables depend on the positions, not on q or k."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'rotate_half'}, 'calls': 2}

def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class RotaryEmbedding(nn.Module):
    def __init__(self, dim=16, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, position_ids):
        freqs = (self.inv_freq[None, :, None] * position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary_emb = RotaryEmbedding()

    def forward(self, q, k, position_ids):
        cos, sin = self.rotary_emb(q, position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)


def get_inputs():
    return [torch.randn(2, 4, 12, 16), torch.randn(2, 4, 12, 16), torch.arange(12)[None].expand(2, -1)]
