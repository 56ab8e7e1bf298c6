"""A LayerNorm that divides in place: `xc = x - mean`, `var = xc.pow(2).mean(-1, keepdim=True)`,
`xc /= torch.sqrt(var + eps)` (Tensor.__itruediv__), `return xc * self.weight + self.bias`."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1}


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        xc = x - mean
        var = xc.pow(2).mean(-1, keepdim=True)
        xc /= torch.sqrt(var + self.eps)
        return xc * self.weight + self.bias


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LayerNorm(768)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 768)]
