"""nn.Linear."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 1, 'route': 'module'}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 96)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(4, 16, 64)]
