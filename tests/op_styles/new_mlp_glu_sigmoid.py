"""A GLU MLP with F.glu (a * sigmoid(b), the original gated linear unit): a sigmoid gate, not SiLU or
GELU, so no fused_mlp; the two linears are matmul."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 2}

class GLUFeedForward(nn.Module):
    def __init__(self, dim=32, hidden=64):
        super().__init__()
        self.proj_in = nn.Linear(dim, 2 * hidden)
        self.proj_out = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.proj_out(F.glu(self.proj_in(x), dim=-1))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ff = GLUFeedForward()

    def forward(self, x):
        return self.ff(x)


def get_inputs():
    return [torch.randn(2, 10, 32)]
