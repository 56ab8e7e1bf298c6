"""nn.RMSNorm (torchtitan's choice)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1, 'route': 'module'}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(64, eps=1e-6)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(4, 8, 64)]
