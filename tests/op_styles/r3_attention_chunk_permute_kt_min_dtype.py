"""q, k, v from `torch.chunk(self.c_attn(x), 3, dim=-1)`; k laid out transposed by one
`permute(0, 2, 3, 1)` (no `.transpose(-2, -1)`), the scores divided by √D, and the causal mask
applied as HF does with `min_dtype = torch.finfo(dtype).min`:
`torch.where(mask[:, :, :T, :T], scores, min_dtype)` (a Python float, not a tensor)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1,
            'also': ['matmul']}


class SelfAttention(nn.Module):
    def __init__(self, d_model=512, n_heads=8, max_len=256):
        super().__init__()
        self.h = n_heads
        self.d = d_model // n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        mask = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
        self.register_buffer("mask", mask[None, None], persistent=False)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = torch.chunk(self.c_attn(x), 3, dim=-1)
        q = q.reshape(B, T, self.h, self.d).permute(0, 2, 1, 3)
        k = k.reshape(B, T, self.h, self.d).permute(0, 2, 3, 1)
        v = v.reshape(B, T, self.h, self.d).permute(0, 2, 1, 3)
        scores = torch.matmul(q, k) / math.sqrt(self.d)
        min_dtype = torch.finfo(scores.dtype).min
        scores = torch.where(self.mask[:, :, :T, :T], scores, min_dtype)
        probs = F.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(B, T, -1)
        return self.c_proj(out)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = SelfAttention()

    def forward(self, x):
        return self.attn(x)


def get_inputs():
    return [torch.randn(2, 128, 512)]
