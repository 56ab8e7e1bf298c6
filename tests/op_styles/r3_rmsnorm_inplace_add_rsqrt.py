"""An RMSNorm written with in-place tensor methods: `var.add_(eps).rsqrt_()`, the product of a
float32 copy, cast back with `.type_as(x)` and the weight applied with `.mul_(self.weight)`."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-05}, 'calls': 1}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        out = x.float()
        var = out.pow(2).mean(-1, keepdim=True)
        var.add_(self.eps).rsqrt_()
        out = out * var
        return out.type_as(x).mul_(self.weight)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(768)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 768)]
