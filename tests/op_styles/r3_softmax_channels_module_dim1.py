"""A segmentation head's class probabilities: `nn.Softmax(dim=1)` over the channel dim of a
[B, C, H, W] map (not the last dim)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {'axis': 1}, 'calls': 1}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.softmax = nn.Softmax(dim=1)

    def forward(self, logits):
        return self.softmax(logits)


def get_inputs():
    return [torch.randn(4, 21, 64, 64)]
