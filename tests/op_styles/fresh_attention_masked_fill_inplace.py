"""Causal attention with an in-place masked_fill_ of a triu(1) bool mask and k.mT."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1}

class Model(nn.Module):
    def forward(self, q, k, v):
        t = q.shape[-2]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        scores = (q @ k.mT) / math.sqrt(q.shape[-1])
        scores.masked_fill_(mask, float("-inf"))
        return F.softmax(scores, dim=-1) @ v


def get_inputs():
    return [torch.randn(2, 2, 14, 8) for _ in range(3)]
