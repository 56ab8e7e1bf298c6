"""T5LayerNorm: variance of hidden_states in float32, no mean subtraction, weight times."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1}

class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_norm = T5LayerNorm(32)

    def forward(self, x):
        return self.layer_norm(x)


def get_inputs():
    return [torch.randn(4, 8, 32)]
