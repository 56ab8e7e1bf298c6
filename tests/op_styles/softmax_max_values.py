"""Softmax written out with x.max(dim=-1, keepdim=True).values."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1}

class Model(nn.Module):
    def forward(self, x):
        shifted = x - x.max(dim=-1, keepdim=True).values
        exps = shifted.exp()
        return exps / exps.sum(dim=-1, keepdim=True)


def get_inputs():
    return [torch.randn(8, 4, 50)]
