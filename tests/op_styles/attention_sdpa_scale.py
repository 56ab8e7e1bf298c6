"""SDPA with an explicit scale keyword, not causal."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': False, 'scale': 0.1}, 'calls': 1}

class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, scale=0.1)


def get_inputs():
    return [torch.randn(2, 4, 24, 16) for _ in range(3)]
