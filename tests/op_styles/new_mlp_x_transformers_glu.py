"""x-transformers' FeedForward: Sequential(GLU(proj(x).chunk(2, -1) -> x * nn.SiLU()(gate)), Dropout, Linear)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {'fused': 'gate_up'}, 'calls': 1}

class GLU(nn.Module):
    def __init__(self, dim_in, dim_out, activation):
        super().__init__()
        self.act = activation
        self.proj = nn.Linear(dim_in, dim_out * 2)

    def forward(self, x):
        x, gate = self.proj(x).chunk(2, dim=-1)
        return x * self.act(gate)


class FeedForward(nn.Module):
    def __init__(self, dim=32, mult=2):
        super().__init__()
        inner_dim = dim * mult
        self.ff = nn.Sequential(GLU(dim, inner_dim, nn.SiLU()), nn.Dropout(0.0),
                                nn.Linear(inner_dim, dim))

    def forward(self, x):
        return self.ff(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ff = FeedForward()

    def forward(self, x):
        return self.ff(x)


def get_inputs():
    return [torch.randn(2, 10, 32)]
