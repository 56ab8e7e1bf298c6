"""A plain GELU MLP in nn.Sequential (ViT's Mlp): the GELU is its own target beside the linears."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'none'}, 'calls': 1, 'also': ['matmul']}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(4, 10, 32)]
