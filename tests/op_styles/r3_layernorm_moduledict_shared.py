"""A LayerNorm shared between two layers (one instance held by both, so its weights are tied),
the layers kept in an nn.ModuleDict and run by name: one target of 2 calls."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 2, 'also': ['matmul']}


class Layer(nn.Module):
    def __init__(self, norm, dim):
        super().__init__()
        self.norm = norm
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return self.fc(self.norm(x))


class Model(nn.Module):
    def __init__(self, dim=512):
        super().__init__()
        shared = nn.LayerNorm(dim)
        self.blocks = nn.ModuleDict({"first": Layer(shared, dim), "second": Layer(shared, dim)})

    def forward(self, x):
        for name in ("first", "second"):
            x = self.blocks[name](x)
        return x


def get_inputs():
    return [torch.randn(2, 128, 512)]
