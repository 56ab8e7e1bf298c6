"""RMSNorm from torch.norm(x, dim=-1) * d ** (-1/2), x / (rms + eps), scale first (an RMSNorm reference repository's style)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-08}, 'calls': 1}

class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-8):
        super().__init__()
        self.d = d
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(d))

    def forward(self, x):
        norm_x = torch.norm(x, dim=-1, keepdim=True)
        rms_x = norm_x * self.d ** (-1.0 / 2)
        x_normed = x / (rms_x + self.eps)
        return self.scale * x_normed


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(32)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(4, 9, 32)]
