"""diffusers' FeedForward with activation_fn="geglu": net = ModuleList([GEGLU, Dropout, Linear])
run in a loop; GEGLU is `hidden_states, gate = self.proj(hidden_states).chunk(2, dim=-1)` then
`hidden_states * self.gelu(gate)` (a method calling F.gelu): the gate is the SECOND half."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {'activation': 'gelu', 'fused': 'gate_up'},
            'calls': 1}


class GEGLU(nn.Module):
    def __init__(self, dim_in, dim_out, bias=True):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out * 2, bias=bias)

    def gelu(self, gate):
        return F.gelu(gate)

    def forward(self, hidden_states):
        hidden_states = self.proj(hidden_states)
        hidden_states, gate = hidden_states.chunk(2, dim=-1)
        return hidden_states * self.gelu(gate)


class FeedForward(nn.Module):
    def __init__(self, dim=128, mult=4, dropout=0.0):
        super().__init__()
        inner_dim = int(dim * mult)
        self.net = nn.ModuleList([])
        self.net.append(GEGLU(dim, inner_dim))
        self.net.append(nn.Dropout(dropout))
        self.net.append(nn.Linear(inner_dim, dim))

    def forward(self, hidden_states):
        for module in self.net:
            hidden_states = module(hidden_states)
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ff = FeedForward()

    def forward(self, x):
        return self.ff(x)


def get_inputs():
    return [torch.randn(2, 64, 128)]
