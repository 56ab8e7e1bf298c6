"""Cohere's LayerNorm: float32, mean, (x - mean).pow(2).mean, (x - mean) * rsqrt(var + eps), weight * x, no bias."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1}

class CohereLayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        mean = hidden_states.mean(-1, keepdim=True)
        variance = (hidden_states - mean).pow(2).mean(-1, keepdim=True)
        hidden_states = (hidden_states - mean) * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight.to(torch.float32) * hidden_states
        return hidden_states.to(input_dtype)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = CohereLayerNorm(32)

    def forward(self, x):
        return self.input_layernorm(x)


def get_inputs():
    return [torch.randn(2, 8, 32)]
