"""timm Swin: nn.LayerNorm(C) over the last dim of a [B, H, W, C] feature map."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1, 'route': 'module'}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(24)

    def forward(self, x):
        return self.norm1(x)


def get_inputs():
    return [torch.randn(2, 7, 7, 24)]
