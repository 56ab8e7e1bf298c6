"""A projection written with `torch.mm` on the flattened tokens: `torch.mm(x.view(-1, d),
self.weight.t()).view(B, T, -1)` (fairseq-era and quantization fallback code)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 1}


class Projection(nn.Module):
    def __init__(self, d_in=512, d_out=2048):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_out, d_in) * d_in ** -0.5)

    def forward(self, x):
        B, T, d = x.shape
        return torch.mm(x.view(-1, d), self.weight.t()).view(B, T, -1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = Projection()

    def forward(self, x):
        return self.proj(x)


def get_inputs():
    return [torch.randn(4, 128, 512)]
