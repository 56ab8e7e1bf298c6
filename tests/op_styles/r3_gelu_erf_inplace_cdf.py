"""The erf GELU with an in-place tail: `cdf = torch.erf(x / math.sqrt(2.0))`,
`cdf.add_(1.0).mul_(0.5)`, `return x * cdf`."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'none'}, 'calls': 1}


def gelu(x):
    cdf = torch.erf(x / math.sqrt(2.0))
    cdf.add_(1.0).mul_(0.5)
    return x * cdf


class Model(nn.Module):
    def forward(self, x):
        return gelu(x)


def get_inputs():
    return [torch.randn(4, 128, 1024)]
