"""Gemma's MLP: down_proj(act_fn(gate_proj(x)) * up_proj(x)) with act_fn nn.GELU(approximate='tanh')."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {'activation': 'gelu_tanh'}, 'calls': 1}

class GemmaMLP(nn.Module):
    def __init__(self, hidden_size=32, intermediate_size=96):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.act_fn = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = GemmaMLP()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 9, 32)]
