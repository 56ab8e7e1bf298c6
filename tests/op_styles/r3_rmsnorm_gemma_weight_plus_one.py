"""Gemma's RMSNorm with the offset spelled the other way round: `output * (self.weight.float() +
1.0)` (zero-initialized weight), computed in float32 and cast back with `.type_as(x)`."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06, 'weight_offset': 1.0},
            'calls': 1, 'route': 'no'}


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (self.weight.float() + 1.0)
        return output.type_as(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = GemmaRMSNorm(1024)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 1024)]
