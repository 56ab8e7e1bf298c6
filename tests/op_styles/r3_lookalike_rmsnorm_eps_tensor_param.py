"""A look-alike: an RMS-style scaling whose "eps" is a learned per-channel tensor added to the
mean square (`x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.shift)` with shift a [D]
Parameter broadcast over the features) — not an RMSNorm (a different eps per feature), and its
mean is a piece, not a reduce target."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None}


class Scale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.shift = nn.Parameter(torch.full((dim,), 1e-3))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.shift)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = Scale(1024)

    def forward(self, x):
        return self.scale(x)


def get_inputs():
    return [torch.randn(2, 128, 1024)]
