"""nn.LayerNorm (GPT-2 ln_1)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1, 'route': 'module'}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(64)

    def forward(self, x):
        return self.ln_1(x)


def get_inputs():
    return [torch.randn(2, 8, 64)]
