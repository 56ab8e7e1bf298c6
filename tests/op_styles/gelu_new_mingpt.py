"""minGPT's NewGELU (KernelBench 88): tanh form with torch.pow(x, 3.0)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'tanh'}, 'calls': 1}

class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gelu = NewGELU()

    def forward(self, x):
        return self.gelu(x)


def get_inputs():
    return [torch.randn(24, 40)]
