"""LayerNorm with (var + eps).sqrt() as a Tensor method and the mean subtracted once."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1}

class LN(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w = nn.Parameter(torch.ones(dim))
        self.b = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mu = x.mean(dim=-1, keepdim=True)
        var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
        return self.w * ((x - mu) / (var + 1e-5).sqrt()) + self.b


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = LN(24)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(3, 7, 24)]
