"""nn.LayerNorm over (C, H, W) (KernelBench L1 40): one row per sample, its normalized dims
flattened."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1, 'route': 'module'}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=(4, 8, 16))

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.rand(2, 4, 8, 16)]
