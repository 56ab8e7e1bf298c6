"""LayerNorm with the centered value squared as xc * xc, no affine."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1}

class Model(nn.Module):
    def forward(self, x):
        xc = x - x.mean(dim=-1, keepdim=True)
        var = (xc * xc).mean(dim=-1, keepdim=True)
        return xc / torch.sqrt(var + 1e-5)


def get_inputs():
    return [torch.randn(8, 48)]
