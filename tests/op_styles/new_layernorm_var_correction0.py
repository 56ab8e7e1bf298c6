"""LayerNorm with torch.var(x, dim=-1, keepdim=True, correction=0) and (x - mu) / torch.sqrt(var + eps) * g + b."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1}

class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.ones(dim))
        self.b = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mu = torch.mean(x, dim=-1, keepdim=True)
        var = torch.var(x, dim=-1, keepdim=True, correction=0)
        return (x - mu) / torch.sqrt(var + self.eps) * self.g + self.b


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LayerNorm(32)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 9, 32)]
