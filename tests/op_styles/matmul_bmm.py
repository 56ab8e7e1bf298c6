"""torch.bmm of two batched operands."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 1, 'route': 'call'}

class Model(nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(4, 32, 48), torch.randn(4, 48, 40)]
