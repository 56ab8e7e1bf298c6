"""torch.sum(x, dim=1, keepdim=True) (KernelBench 47)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'reduce', 'params': {'axis': 1}, 'calls': 1}

class Model(nn.Module):
    def forward(self, x):
        return torch.sum(x, dim=1, keepdim=True)


def get_inputs():
    return [torch.rand(4, 256, 80)]
