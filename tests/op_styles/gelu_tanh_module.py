"""nn.GELU(approximate='tanh') inside an MLP-free block."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'tanh'}, 'calls': 1}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.act(x)


def get_inputs():
    return [torch.randn(12, 32)]
