"""F.softmax with dtype=torch.float32 (HF's eager attention probabilities)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'route': 'call'}

class Model(nn.Module):
    def forward(self, x):
        return F.softmax(x, dim=-1, dtype=torch.float32)


def get_inputs():
    return [torch.randn(16, 128)]
