"""F.gelu(x, approximate='tanh') (GPT-2's gelu_new through PyTorch)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'tanh'}, 'calls': 1, 'route': 'call'}

class Model(nn.Module):
    def forward(self, x):
        return F.gelu(x, approximate="tanh")


def get_inputs():
    return [torch.randn(16, 64)]
