"""Attention written with in-place steps: `scores /= math.sqrt(D)` (Tensor.__itruediv__),
`scores.masked_fill_(causal, float("-inf"))` with the mask built in forward
(`torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)`), `scores = scores.softmax(-1)`,
`torch.matmul(scores, v)`."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1}


class Model(nn.Module):
    def forward(self, q, k, v):
        T, D = q.shape[-2], q.shape[-1]
        scores = torch.matmul(q, k.transpose(-2, -1))
        scores /= math.sqrt(D)
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        scores.masked_fill_(causal, float("-inf"))
        scores = scores.softmax(-1)
        return torch.matmul(scores, v)


def get_inputs():
    return [torch.randn(2, 8, 128, 64) for _ in range(3)]
