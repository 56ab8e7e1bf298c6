"""An RMSNorm in tensor methods only: `x.square().sum(-1, keepdim=True).div(d)`, `.add(eps)`,
`.rsqrt()`, then `x.mul(..).mul(self.weight)`."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        ms = x.square().sum(-1, keepdim=True).div(self.dim)
        return x.mul(ms.add(self.eps).rsqrt()).mul(self.weight)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(1024)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 1024)]
