"""An erf GELU written into preallocated buffers: `torch.erf(x * (1/√2), out=cdf)`,
`cdf.add_(1.0).mul_(0.5)`, then `torch.mul(x, cdf, out=torch.empty_like(x))`."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'none'}, 'calls': 1}


def gelu_out(x):
    cdf = torch.empty_like(x)
    torch.erf(x * (1.0 / math.sqrt(2.0)), out=cdf)
    cdf.add_(1.0).mul_(0.5)
    out = torch.empty_like(x)
    torch.mul(x, cdf, out=out)
    return out


class Model(nn.Module):
    def forward(self, x):
        return gelu_out(x)


def get_inputs():
    return [torch.randn(4, 128, 1024)]
