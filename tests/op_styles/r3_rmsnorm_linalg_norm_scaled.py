"""An RMSNorm through `torch.linalg.norm(x, dim=-1, keepdim=True) * d ** -0.5` (the vector
2-norm by linalg.norm rather than vector_norm), eps added to that root, times a gain."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-08, 'eps_outside_root': True},
            'calls': 1, 'route': 'no'}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-8):
        super().__init__()
        self.scale = dim ** -0.5
        self.eps = eps
        self.g = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        norm = torch.linalg.norm(x, dim=-1, keepdim=True) * self.scale
        return x / (norm + self.eps) * self.g


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(1024)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 1024)]
