"""Softmax without the max shift: e = x.exp(); e / e.sum(-1)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1}

class Model(nn.Module):
    def forward(self, x):
        e = x.exp()
        return e / e.sum(-1, keepdim=True)


def get_inputs():
    return [torch.randn(10, 30)]
