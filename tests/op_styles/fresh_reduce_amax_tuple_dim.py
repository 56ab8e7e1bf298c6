"""torch.amax(x, dim=(1,)) with a tuple dim."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'reduce', 'params': {'op': 'amax', 'axis': 1}, 'calls': 1}

class Model(nn.Module):
    def forward(self, x):
        return torch.amax(x, dim=(1,))


def get_inputs():
    return [torch.rand(4, 256, 80)]
