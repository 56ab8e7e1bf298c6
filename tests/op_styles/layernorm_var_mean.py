"""LayerNorm with torch.var_mean(unbiased=False), then (x - mean) / sqrt(var + eps) * w + b."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1}

class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = LayerNorm(64)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(2, 16, 64)]
