"""F.linear(x, self.weight, self.bias) on a 3-D [B, S, D] input."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 1}

class Model(nn.Module):
    def __init__(self, d=32, f=64):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(f, d) * 0.02)
        self.bias = nn.Parameter(torch.zeros(f))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(3, 7, 32)]
