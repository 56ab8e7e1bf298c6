"""torch.mean(x, dim=(-1,)) with a one-element tuple of a negative dim."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'reduce', 'params': {'op': 'mean'}, 'calls': 1}

class Model(nn.Module):
    def forward(self, x):
        return torch.mean(x, dim=(-1,))


def get_inputs():
    return [torch.rand(64, 2048)]
