"""The tanh GELU as one chain of tensor methods: `x.mul(0.5).mul(x.pow(3).mul(0.044715).add(x)
.mul(math.sqrt(2.0 / math.pi)).tanh().add(1.0))`."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'tanh'}, 'calls': 1}


class GELUActivation(nn.Module):
    def forward(self, x):
        inner = x.pow(3).mul(0.044715).add(x).mul(math.sqrt(2.0 / math.pi))
        return x.mul(0.5).mul(inner.tanh().add(1.0))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = GELUActivation()

    def forward(self, x):
        return self.act(x)


def get_inputs():
    return [torch.randn(4, 128, 1024)]
