"""nanoGPT's LayerNorm with an optional bias (bias=False)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1}

class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_f = LayerNorm(48, bias=False)

    def forward(self, x):
        return self.ln_f(x)


def get_inputs():
    return [torch.randn(2, 12, 48)]
