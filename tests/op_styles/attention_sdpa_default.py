"""SDPA with defaults (KernelBench 97)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': False}, 'calls': 1, 'route': 'call'}

class Model(nn.Module):
    def forward(self, Q, K, V):
        return torch.nn.functional.scaled_dot_product_attention(Q, K, V)


def get_inputs():
    return [torch.rand(2, 4, 32, 16) for _ in range(3)]
