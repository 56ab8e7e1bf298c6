"""The exact GELU through the complementary error function, as JAX-ported code writes it:
`0.5 * x * torch.erfc(-x / math.sqrt(2.0))` (erfc(-z) = 1 + erf(z))."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'none'}, 'calls': 1}


class Model(nn.Module):
    def forward(self, x):
        return 0.5 * x * torch.erfc(-x / math.sqrt(2.0))


def get_inputs():
    return [torch.randn(4, 128, 1024)]
