"""HF decoder layer: hidden = residual + hidden; post_attention_layernorm(hidden) with a hand-written RMSNorm."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'add_rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1, 'route': 'call chain'}

class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.post_attention_layernorm = RMSNorm(32)

    def forward(self, residual, hidden_states):
        hidden_states = residual + hidden_states
        return self.post_attention_layernorm(hidden_states), hidden_states


def get_inputs():
    return [torch.randn(2, 8, 32), torch.randn(2, 8, 32)]
