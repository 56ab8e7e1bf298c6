"""x += y before an nn.RMSNorm: recognized, but verify does not defer an in-place add."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'add_rmsnorm', 'params': {'inplace_add': True}, 'calls': 1, 'route': 'no'}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(32, eps=1e-5)

    def forward(self, x, y):
        x = x.clone()
        x += y
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 8, 32), torch.randn(2, 8, 32)]
