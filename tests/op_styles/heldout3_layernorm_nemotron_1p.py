"""Nemotron's NemotronLayerNorm1P (HF): an nn.LayerNorm subclass whose weight is stored zero-
centred and used as weight + 1: F.layer_norm(input, normalized_shape, self.weight + 1, self.bias,
self.eps) with autocast turned off around it. A LayerNorm with a bias, eps 1e-5."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1}


class NemotronLayerNorm1P(nn.LayerNorm):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, bias=bias)
        nn.init.zeros_(self.weight)

    def forward(self, input):
        with torch.autocast(device_type=input.device.type, enabled=False):
            return F.layer_norm(input, self.normalized_shape, self.weight + 1, self.bias, self.eps)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = NemotronLayerNorm1P(64)

    def forward(self, hidden_states):
        return self.input_layernorm(hidden_states)


def get_inputs():
    return [torch.randn(4, 16, 64)]
