"""RMS as x.norm(2, dim=-1) * d ** -0.5, then x / clamp-free (rms + eps) * weight."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1}

class ScaleNormRMS(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.scale = dim ** -0.5
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        norm = x.norm(2, dim=-1, keepdim=True) * self.scale
        return x / (norm + self.eps) * self.weight


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = ScaleNormRMS(32)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(5, 7, 32)]
