"""An RMSNorm with eps added outside the root: `x / (x.pow(2).mean(-1, keepdim=True).sqrt() +
eps) * w`. It is the RMS normalization (the profiler's rmsnorm) but not F.rms_norm's formula,
which adds eps under the root: the site notes `eps_outside_root`, and verify does not splice it."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06, 'eps_outside_root': True},
            'calls': 1, 'route': 'no'}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps) * self.w


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(1024)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 1024)]
