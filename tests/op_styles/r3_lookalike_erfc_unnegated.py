"""A look-alike of the erfc GELU: `0.5 * x * torch.erfc(x / math.sqrt(2.0))` without the
negation is x·(1 - Φ(x)), not GELU (x·Φ(x)): no target."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': None}


class Model(nn.Module):
    def forward(self, x):
        return 0.5 * x * torch.erfc(x / math.sqrt(2.0))


def get_inputs():
    return [torch.randn(4, 128, 1024)]
