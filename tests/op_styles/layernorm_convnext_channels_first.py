"""ConvNeXt's channels_first LayerNorm written out over dim 1."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-06}, 'calls': 1, 'route': 'no'}

class LayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LayerNorm(16)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 16, 8, 8)]
