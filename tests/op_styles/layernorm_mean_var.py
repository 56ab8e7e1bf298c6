"""LayerNorm from x.mean and x.var(unbiased=False), rsqrt."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-06}, 'calls': 1}

class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) * torch.rsqrt(var + self.eps) + self.beta


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LayerNorm(32)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(4, 10, 32)]
