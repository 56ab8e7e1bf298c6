"""`torch.sum(x * x, dim=-1)`: a squared L2 norm per row (a distance, an auxiliary loss). The
square is its own elementwise op; the sum over the last dim of x·x is a row-wise sum: a reduce."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'reduce', 'params': {}, 'calls': 1}


class Model(nn.Module):
    def forward(self, x):
        return torch.sum(x * x, dim=-1)


def get_inputs():
    return [torch.randn(64, 16, 256)]
