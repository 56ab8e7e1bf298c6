"""nanoGPT's non-flash path, written differently: `c_attn(x).view(B, T, 3, H, D)` indexed
`[:, :, 0]` / `[:, :, 1]` / `[:, :, 2]` instead of `.split(n_embd, dim=2)`, the
`torch.tril(torch.ones(T, T)).view(1, 1, T, T)` buffer sliced `[:, :, :T, :T]`, and
`F.dropout(att, p, training=self.training)` in eval."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1,
            'also': ['matmul']}


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd=512, n_head=8, block_size=256, dropout=0.1):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.n_head = n_head
        self.dropout = dropout
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        qkv = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head)
        q = qkv[:, :, 0].transpose(1, 2)
        k = qkv[:, :, 1].transpose(1, 2)
        v = qkv[:, :, 2].transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = F.dropout(att, p=self.dropout, training=self.training)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return F.dropout(self.c_proj(y), p=self.dropout, training=self.training)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = CausalSelfAttention()

    def forward(self, x):
        return self.attn(x)


def get_inputs():
    return [torch.randn(2, 128, 512)]
