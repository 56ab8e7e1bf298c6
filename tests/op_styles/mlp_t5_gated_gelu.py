"""T5's DenseGatedActDense with NewGELU: wo(act(wi_0(x)) * wi_1(x))."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {'activation': 'gelu_tanh'}, 'calls': 1}

class NewGELUActivation(nn.Module):
    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class T5DenseGatedActDense(nn.Module):
    def __init__(self, d_model=32, d_ff=64):
        super().__init__()
        self.wi_0 = nn.Linear(d_model, d_ff, bias=False)
        self.wi_1 = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)
        self.act = NewGELUActivation()

    def forward(self, hidden_states):
        hidden_gelu = self.act(self.wi_0(hidden_states))
        hidden_linear = self.wi_1(hidden_states)
        return self.wo(hidden_gelu * hidden_linear)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.DenseReluDense = T5DenseGatedActDense()

    def forward(self, x):
        return self.DenseReluDense(x)


def get_inputs():
    return [torch.randn(2, 7, 32)]
