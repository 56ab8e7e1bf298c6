"""An RMSNorm split across modules: the child normalizes (`x * torch.rsqrt(x.pow(2).mean(-1,
keepdim=True) + eps)`, no weight) and the parent block owns the gain and multiplies it in."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1}


class Normalize(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class Block(nn.Module):
    def __init__(self, dim=1024):
        super().__init__()
        self.normalize = Normalize()
        self.norm_gain = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.normalize(x) * self.norm_gain


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x)


def get_inputs():
    return [torch.randn(2, 128, 1024)]
