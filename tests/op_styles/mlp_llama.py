"""Meta llama FeedForward: w2(F.silu(w1(x)) * w3(x))."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {}, 'calls': 1, 'route': 'module'}

class FeedForward(nn.Module):
    def __init__(self, dim=32, hidden_dim=96):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.feed_forward = FeedForward()

    def forward(self, x):
        return self.feed_forward(x)


def get_inputs():
    return [torch.randn(2, 12, 32)]
