"""An RMSNorm with the reciprocal root written as a power: `x * (x.pow(2).mean(-1, keepdim=True)
+ eps) ** -0.5 * g` (no rsqrt, no sqrt)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * (x.pow(2).mean(-1, keepdim=True) + self.eps) ** -0.5 * self.g


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(1024)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 1024)]
