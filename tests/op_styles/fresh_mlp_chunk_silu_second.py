"""Fused projection chunked as (x, gate), out(x * F.silu(gate))."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {'fused': 'gate_up'}, 'calls': 1}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(24, 96, bias=False)
        self.out = nn.Linear(48, 24, bias=False)

    def forward(self, x):
        x, gate = self.proj(x).chunk(2, dim=-1)
        return self.out(x * F.silu(gate))


def get_inputs():
    return [torch.randn(3, 4, 24)]
