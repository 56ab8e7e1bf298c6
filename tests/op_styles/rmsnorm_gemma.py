"""Gemma's RMSNorm: output * (1.0 + weight) in float32."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1, 'route': 'no'}

class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = GemmaRMSNorm(32)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 9, 32)]
