"""Old GPT/BERT-era code turning a 0/1 causal buffer into an additive mask by hand:
`scores + (1.0 - self.bias[:, :, :T, :T]) * -10000.0` (a `torch.tril(torch.ones(..))` float
buffer), then softmax and `@ v`."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1}


class Attention(nn.Module):
    def __init__(self, n_ctx=256):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(n_ctx, n_ctx)).view(1, 1, n_ctx, n_ctx))

    def forward(self, q, k, v):
        T = q.size(-2)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / math.sqrt(v.size(-1))
        b = self.bias[:, :, :T, :T]
        w = w + (1.0 - b) * -10000.0
        w = nn.Softmax(dim=-1)(w)
        return torch.matmul(w, v)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, q, k, v):
        return self.attn(q, k, v)


def get_inputs():
    return [torch.randn(2, 8, 128, 64) for _ in range(3)]
