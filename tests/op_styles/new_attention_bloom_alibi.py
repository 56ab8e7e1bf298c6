"""Bloom-style ALiBi attention: per-head linear position bias added to q @ kᵀ * scale, causal mask, softmax,
@ v. A flash kernel takes a causal mask, not a per-head bias, so it is no flash_attention: the
softmax is a softmax target and the products batched matmuls."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'also': ['matmul']}

def build_alibi_slopes(num_heads):
    start = 2 ** (-(2 ** -(math.log2(num_heads) - 3)))
    return torch.tensor([start ** (i + 1) for i in range(num_heads)])


class BloomAttention(nn.Module):
    def __init__(self, num_heads=4, head_dim=16, max_positions=32):
        super().__init__()
        self.inv_norm_factor = 1.0 / math.sqrt(head_dim)
        slopes = build_alibi_slopes(num_heads)
        positions = torch.arange(max_positions)
        alibi = slopes[:, None, None] * (positions[None, None, :] - positions[None, :, None])
        self.register_buffer("alibi", alibi, persistent=False)
        self.register_buffer("causal", torch.ones(max_positions, max_positions, dtype=torch.bool)
                             .tril(), persistent=False)

    def forward(self, q, k, v):
        t = q.shape[-2]
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.inv_norm_factor
        scores = scores + self.alibi[:, :t, :t]
        scores = scores.masked_fill(~self.causal[:t, :t], torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(probs, v)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attention = BloomAttention()

    def forward(self, q, k, v):
        return self.self_attention(q, k, v)


def get_inputs():
    return [torch.randn(2, 4, 12, 16) for _ in range(3)]
