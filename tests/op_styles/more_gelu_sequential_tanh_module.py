"""`nn.Sequential(nn.Linear, nn.GELU(approximate='tanh'), nn.Linear)` (GPT-2-style MLP built from
modules): the tanh GELU is its own target beside the linears."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'tanh'}, 'calls': 1,
            'also': ['matmul']}


class Model(nn.Module):
    def __init__(self, dim=128):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * dim, dim))

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 32, 128)]
