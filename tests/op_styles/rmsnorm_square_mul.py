"""Mean square written x * x (not pow), rsqrt, weight multiplied first."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-05}, 'calls': 1}

class Norm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        ms = (x * x).mean(dim=-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(ms + self.eps))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = Norm(40)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(6, 40)]
