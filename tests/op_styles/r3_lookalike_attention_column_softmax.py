"""A look-alike of attention: the scores' softmax taken over the QUERY dim (`dim=-2`, as
slot-attention-style competition does) before `@ v`. Not the attention op; its softmax (over dim
2 of the [B, H, T, S] scores) and its two products are ops of their own."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {'axis': 2}, 'calls': 1, 'also': ['matmul']}


class Model(nn.Module):
    def forward(self, q, k, v):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-2) @ v


def get_inputs():
    return [torch.randn(2, 8, 128, 64) for _ in range(3)]
