"""lucidrains' RMSNorm: F.normalize(x, dim=-1) * dim ** 0.5 * gamma (x / max(||x||, 1e-12) * sqrt(d):
an RMSNorm whose eps is a clamp of the norm, not added under the root)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 0.0, 'norm_clamp_min': 1e-12}, 'calls': 1, 'route': 'no'}

class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = dim ** 0.5
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.normalize(x, dim=-1) * self.scale * self.gamma


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(64)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 12, 64)]
