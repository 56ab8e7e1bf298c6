"""A look-alike: a LayerNorm written with `x.var(-1, keepdim=True)`, whose default is the
UNBIASED variance (divides by N - 1), not the population variance LayerNorm uses. It is not the
op, and its mean and variance are pieces, not reduce targets."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None}


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.ones(dim))
        self.b = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.g + self.b


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LayerNorm(768)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 768)]
