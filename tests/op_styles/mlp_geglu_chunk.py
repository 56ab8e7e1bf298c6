"""diffusers-style GEGLU: proj(x).chunk(2, -1), x * F.gelu(gate), then an out linear."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {'activation': 'gelu'}, 'calls': 1}

class FeedForward(nn.Module):
    def __init__(self, dim=32, inner=64):
        super().__init__()
        self.proj = nn.Linear(dim, inner * 2, bias=False)
        self.out = nn.Linear(inner, dim, bias=False)

    def forward(self, x):
        hidden, gate = self.proj(x).chunk(2, dim=-1)
        return self.out(hidden * F.gelu(gate))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ff = FeedForward()

    def forward(self, x):
        return self.ff(x)


def get_inputs():
    return [torch.randn(2, 11, 32)]
