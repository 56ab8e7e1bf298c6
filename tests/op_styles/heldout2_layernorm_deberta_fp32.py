"""DeBERTa's (v1, HF modeling_deberta) hand-written LayerNorm: upcast to float, mean, variance as
(x - mean).pow(2).mean, (x - mean) / torch.sqrt(variance + eps), cast back, weight * y + bias;
eps from config.layer_norm_eps (1e-7)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-07}, 'calls': 1}


class DebertaLayerNorm(nn.Module):
    def __init__(self, size, eps=1e-12):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_type = hidden_states.dtype
        hidden_states = hidden_states.float()
        mean = hidden_states.mean(-1, keepdim=True)
        variance = (hidden_states - mean).pow(2).mean(-1, keepdim=True)
        hidden_states = (hidden_states - mean) / torch.sqrt(variance + self.variance_epsilon)
        hidden_states = hidden_states.to(input_type)
        y = self.weight * hidden_states + self.bias
        return y


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.LayerNorm = DebertaLayerNorm(32, 1e-7)

    def forward(self, x):
        return self.LayerNorm(x)


def get_inputs():
    return [torch.randn(2, 8, 32)]
