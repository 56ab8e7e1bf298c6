"""Softmax written out with torch.max(x, -1, keepdim=True)[0]."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1}

class Model(nn.Module):
    def forward(self, x):
        m = torch.max(x, -1, keepdim=True)[0]
        e = torch.exp(x - m)
        return e / torch.sum(e, -1, keepdim=True)


def get_inputs():
    return [torch.randn(12, 64)]
