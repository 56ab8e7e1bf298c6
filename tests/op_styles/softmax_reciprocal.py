"""Softmax written as e * (1 / e.sum()) via reciprocal."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1}

class Model(nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e * e.sum(-1, keepdim=True).reciprocal()


def get_inputs():
    return [torch.randn(6, 80)]
