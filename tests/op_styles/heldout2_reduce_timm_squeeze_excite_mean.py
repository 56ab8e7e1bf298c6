"""timm's SqueezeExcite (efficientnet_blocks): x_se = x.mean((2, 3), keepdim=True), conv_reduce,
act, conv_expand, x * sigmoid gate. The mean over the trailing H, W of NCHW is one row-wise mean of
H·W per [B, C]; the 1x1 convolutions are no kernel type. (A reduce target needs 2^16 elements
and rows of 32: the feature map is 32x32.)"""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'reduce', 'params': {'op': 'mean'}, 'calls': 1}


class SqueezeExcite(nn.Module):
    def __init__(self, in_chs=16, rd_ratio=0.25):
        super().__init__()
        rd_channels = round(in_chs * rd_ratio)
        self.conv_reduce = nn.Conv2d(in_chs, rd_channels, 1, bias=True)
        self.act1 = nn.ReLU(inplace=True)
        self.conv_expand = nn.Conv2d(rd_channels, in_chs, 1, bias=True)
        self.gate = nn.Sigmoid()

    def forward(self, x):
        x_se = x.mean((2, 3), keepdim=True)
        x_se = self.conv_reduce(x_se)
        x_se = self.act1(x_se)
        x_se = self.conv_expand(x_se)
        return x * self.gate(x_se)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.se = SqueezeExcite()

    def forward(self, x):
        return self.se(x)


def get_inputs():
    return [torch.randn(4, 16, 32, 32)]
