"""F.rms_norm called in a block's forward."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-05}, 'calls': 1}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(48))

    def forward(self, x):
        return F.rms_norm(x, (48,), self.weight, 1e-5)


def get_inputs():
    return [torch.randn(3, 5, 48)]
