"""A fused gate/up projection split with .split(hidden, dim=-1) (Qwen-style packed weights)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {'fused': 'gate_up'}, 'calls': 1}

class MLP(nn.Module):
    def __init__(self, dim=24, hidden=64):
        super().__init__()
        self.hidden = hidden
        self.w12 = nn.Linear(dim, 2 * hidden, bias=False)
        self.w3 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        x1, x2 = self.w12(x).split(self.hidden, dim=-1)
        return self.w3(F.silu(x1) * x2)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(3, 8, 24)]
