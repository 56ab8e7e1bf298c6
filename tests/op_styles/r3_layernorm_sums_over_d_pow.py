"""A LayerNorm written with sums divided by the width and a power for the root:
`mu = x.sum(-1, keepdim=True) / d`, `var = ((x - mu) ** 2).sum(-1, keepdim=True) / d`,
`(x - mu) * torch.pow(var + eps, -0.5) * w + b`."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1}


class LayerNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.d = d
        self.eps = eps
        self.w = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        mu = x.sum(-1, keepdim=True) / self.d
        var = ((x - mu) ** 2).sum(-1, keepdim=True) / self.d
        return (x - mu) * torch.pow(var + self.eps, -0.5) * self.w + self.b


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LayerNorm(768)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 768)]
