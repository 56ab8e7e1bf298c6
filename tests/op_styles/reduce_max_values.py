"""torch.max(x, dim=1).values over the middle dim."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'reduce', 'params': {'op': 'amax', 'axis': 1}, 'calls': 1, 'route': 'call'}

class Model(nn.Module):
    def __init__(self, dim=1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.max(x, dim=self.dim).values


def get_inputs():
    return [torch.rand(4, 256, 80)]
