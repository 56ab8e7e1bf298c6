"""torch.addmm(bias, x, weight.t()) on 2-D rows (a hand-rolled Linear)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 1}

class Model(nn.Module):
    def __init__(self, in_features=64, out_features=48):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.02)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight.t())


def get_inputs():
    return [torch.randn(20, 64)]
