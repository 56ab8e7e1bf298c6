"""RMSNorm with torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps), weight first: self.weight * (x * r)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-05}, 'calls': 1}

class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        r = torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * (x * r)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(40)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(3, 7, 40)]
