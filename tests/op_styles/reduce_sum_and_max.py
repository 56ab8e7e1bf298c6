"""A sum and an amax of one input: two targets, the sum never merged into the amax."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'reduce', 'params': {}, 'calls': 2}

class Model(nn.Module):
    def forward(self, x):
        return x.sum(-1) + x.amax(-1)


def get_inputs():
    return [torch.rand(128, 1024)]
