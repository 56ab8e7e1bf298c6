"""HF's GELUActivation python form: x * 0.5 * (1 + erf(x / sqrt(2)))."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'none'}, 'calls': 1, 'route': 'module'}

class GELU(nn.Module):
    def forward(self, input):
        return input * 0.5 * (1.0 + torch.erf(input / math.sqrt(2.0)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = GELU()

    def forward(self, x):
        return self.act(x)


def get_inputs():
    return [torch.randn(32, 64)]
