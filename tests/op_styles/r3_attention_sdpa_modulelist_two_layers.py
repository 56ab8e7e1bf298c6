"""Two attention layers in an nn.ModuleList loop, each nanoGPT's flash path:
`F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0 if not self.training else
p, is_causal=True)`; q, k, v from `.split(n_embd, dim=2)`: one target of 2 calls."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 2,
            'also': ['matmul']}


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd=512, n_head=8):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.n_head = n_head
        self.n_embd = n_embd
        self.dropout = 0.1

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                           dropout_p=self.dropout if self.training else 0,
                                           is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.h = nn.ModuleList([CausalSelfAttention() for _ in range(2)])

    def forward(self, x):
        for block in self.h:
            x = x + block(x)
        return x


def get_inputs():
    return [torch.randn(2, 128, 512)]
