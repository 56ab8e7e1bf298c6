"""KernelBench-style RMSNorm over dim 1 of NCHW, no weight: x / sqrt(mean(x ** 2, dim=1) + eps)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-05, 'axis': 1}, 'calls': 1}

class Model(nn.Module):
    def __init__(self, num_features=16, eps=1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms


def get_inputs():
    return [torch.rand(2, 16, 8, 8)]
