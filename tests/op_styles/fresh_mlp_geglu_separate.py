"""GeGLU with separate linears: w2(F.gelu(w1(x)) * w3(x))."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {'activation': 'gelu'}, 'calls': 1}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(32, 64, bias=False)
        self.w3 = nn.Linear(32, 64, bias=False)
        self.w2 = nn.Linear(64, 32, bias=False)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)) * self.w3(x))


def get_inputs():
    return [torch.randn(2, 5, 32)]
