"""torch.amax(x, dim=(-2, -1)): a per-[B, C] max over a whole feature map (an FP8 per-tensor-row
scale, a global max pool). The two trailing dims are contiguous: one row-wise amax over H·W."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'reduce', 'params': {'op': 'amax'}, 'calls': 1}


class Model(nn.Module):
    def forward(self, x):
        return torch.amax(x, dim=(-2, -1))


def get_inputs():
    return [torch.randn(4, 64, 32, 32)]
