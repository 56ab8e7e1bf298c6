"""RoPE as cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1) with half-width tables."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'cat halves'}, 'calls': 1}

class Model(nn.Module):
    def __init__(self, seq=10, dim=16):
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(seq).float(), inv)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def forward(self, x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * self.cos - x2 * self.sin, x2 * self.cos + x1 * self.sin], dim=-1)


def get_inputs():
    return [torch.randn(2, 3, 10, 16)]
