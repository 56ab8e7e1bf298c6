"""A SwiGLU on raw weight Parameters (no nn.Linear), as in MoE expert and xformers code:
`F.linear(F.silu(F.linear(x, self.w1)) * F.linear(x, self.w3), self.w2)`."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {}, 'calls': 1}


class Expert(nn.Module):
    def __init__(self, dim=512, hidden=1408):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(hidden, dim) * dim ** -0.5)
        self.w2 = nn.Parameter(torch.randn(dim, hidden) * hidden ** -0.5)
        self.w3 = nn.Parameter(torch.randn(hidden, dim) * dim ** -0.5)

    def forward(self, x):
        return F.linear(F.silu(F.linear(x, self.w1)) * F.linear(x, self.w3), self.w2)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.expert = Expert()

    def forward(self, x):
        return self.expert(x)


def get_inputs():
    return [torch.randn(2, 128, 512)]
