"""CLIP's MLP with QuickGELU, x * sigmoid(1.702 * x): a sigmoid approximation, not the erf or tanh GELU,
so no gelu target (and no SiLU: the sigmoid reads 1.702 * x); the two linears are matmul."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 2}

class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class CLIPMLP(nn.Module):
    def __init__(self, dim=32, hidden=128):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.activation_fn = QuickGELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, hidden_states):
        hidden_states = self.fc1(hidden_states)
        hidden_states = self.activation_fn(hidden_states)
        return self.fc2(hidden_states)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = CLIPMLP()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 10, 32)]
