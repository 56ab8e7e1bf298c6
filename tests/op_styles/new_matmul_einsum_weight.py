"""A projection written torch.einsum('bsd,df->bsf', x, w) with a [D, F] parameter (JAX-ported code)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 1}

class Model(nn.Module):
    def __init__(self, d=32, f=80):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, f) * 0.02)

    def forward(self, x):
        return torch.einsum("bsd,df->bsf", x, self.w)


def get_inputs():
    return [torch.randn(2, 10, 32)]
