"""A SwiGLU whose activation runs in place (`F.silu(gate, inplace=True)`, as memory-saving
vision and MoE code writes it): `self.w2(F.silu(self.w1(x), inplace=True) * self.w3(x))`."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {}, 'calls': 1}


class FeedForward(nn.Module):
    def __init__(self, dim=512, hidden=1376):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x), inplace=True) * self.w3(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.feed_forward = FeedForward()

    def forward(self, x):
        return self.feed_forward(x)


def get_inputs():
    return [torch.randn(2, 128, 512)]
