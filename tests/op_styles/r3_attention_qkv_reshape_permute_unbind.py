"""One `nn.Linear(d, 3d)` for q, k and v, split as timm does (`reshape(B, T, 3, H, D).permute(2,
0, 3, 1, 4)`, `unbind(0)`), with a causal bool buffer applied by `masked_fill(~mask[:T, :T],
float("-inf"))`."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'scale': 0.125},
            'calls': 1, 'also': ['matmul']}


class CausalAttention(nn.Module):
    def __init__(self, dim=512, num_heads=8, max_len=256):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("mask", torch.ones(max_len, max_len, dtype=torch.bool).tril())

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.qkv(x).reshape(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.masked_fill(~self.mask[:T, :T], float("-inf"))
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = CausalAttention()

    def forward(self, x):
        return self.attn(x)


def get_inputs():
    return [torch.randn(2, 128, 512)]
