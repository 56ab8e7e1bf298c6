"""diffusers' FeedForward with activation_fn="gelu-approximate": the GELU module projects then
applies `F.gelu(gate, approximate="tanh")`; Dropout; the out Linear. No gate: a plain MLP, its
GELU a target beside the linears."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'tanh'}, 'calls': 1,
            'also': ['matmul']}


class GELU(nn.Module):
    def __init__(self, dim_in, dim_out, approximate="none", bias=True):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out, bias=bias)
        self.approximate = approximate

    def gelu(self, gate):
        return F.gelu(gate, approximate=self.approximate)

    def forward(self, hidden_states):
        hidden_states = self.proj(hidden_states)
        return self.gelu(hidden_states)


class FeedForward(nn.Module):
    def __init__(self, dim=128, mult=4):
        super().__init__()
        self.net = nn.ModuleList([GELU(dim, dim * mult, approximate="tanh"), nn.Dropout(0.0),
                                  nn.Linear(dim * mult, dim)])

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
