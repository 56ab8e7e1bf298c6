"""RMSNorm as one method chain: x * x.pow(2).mean(-1, keepdim=True).add(eps).rsqrt(), then * weight."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1}

class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * x.pow(2).mean(-1, keepdim=True).add(self.eps).rsqrt() * self.weight


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(48)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 10, 48)]
