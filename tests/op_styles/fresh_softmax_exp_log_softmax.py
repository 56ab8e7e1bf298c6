"""Softmax as (x - x.logsumexp(-1, keepdim=True)).exp()."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1}

class Model(nn.Module):
    def forward(self, x):
        return (x - x.logsumexp(-1, keepdim=True)).exp()


def get_inputs():
    return [torch.randn(8, 40)]
