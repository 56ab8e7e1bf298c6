"""A softmax in place, as in memory-tight inference code: `x = x - x.amax(-1, keepdim=True)`,
`torch.exp_(x)`, `x.div_(x.sum(-1, keepdim=True))`."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1}


def softmax_(x):
    x = x - x.amax(dim=-1, keepdim=True)
    torch.exp_(x)
    x.div_(x.sum(dim=-1, keepdim=True))
    return x


class Model(nn.Module):
    def forward(self, scores):
        return softmax_(scores)


def get_inputs():
    return [torch.randn(4, 8, 128, 128)]
