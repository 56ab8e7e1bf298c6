"""SwiGLU with SiLU written g * torch.sigmoid(g)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {}, 'calls': 1, 'route': 'module'}

class MLP(nn.Module):
    def __init__(self, dim=32, hidden=64):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        g = self.gate(x)
        return self.down(g * torch.sigmoid(g) * self.up(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 9, 32)]
