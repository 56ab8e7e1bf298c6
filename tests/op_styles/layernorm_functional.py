"""F.layer_norm in ConvNeXt's channels_last path."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-06}, 'calls': 1}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(32))
        self.bias = nn.Parameter(torch.zeros(32))

    def forward(self, x):
        return F.layer_norm(x, (32,), self.weight, self.bias, 1e-6)


def get_inputs():
    return [torch.randn(2, 4, 4, 32)]
