"""Phi-3's MLP: gate_up_proj(x).chunk(2, dim=-1), up * act(gate), down_proj."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {'fused': 'gate_up'}, 'calls': 1, 'route': 'no'}

class Phi3MLP(nn.Module):
    def __init__(self, hidden=32, intermediate=80):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.activation_fn = nn.SiLU()

    def forward(self, hidden_states):
        up_states = self.gate_up_proj(hidden_states)
        gate, up_states = up_states.chunk(2, dim=-1)
        up_states = up_states * self.activation_fn(gate)
        return self.down_proj(up_states)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Phi3MLP()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 10, 32)]
