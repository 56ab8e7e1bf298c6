"""A look-alike of an RMSNorm: `x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)` sums the
squares without dividing by d — an L2 normalization (off by √d), not an RMSNorm; its sum is a
piece of it, not a reduce target."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None}


class Model(nn.Module):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-12)


def get_inputs():
    return [torch.randn(2, 128, 1024)]
