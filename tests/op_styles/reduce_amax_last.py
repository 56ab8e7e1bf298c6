"""x.amax(-1)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'reduce', 'params': {'op': 'amax'}, 'calls': 1, 'route': 'call'}

class Model(nn.Module):
    def forward(self, x):
        return x.amax(-1)


def get_inputs():
    return [torch.rand(256, 512)]
