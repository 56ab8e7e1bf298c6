"""x @ W.t() with a parameter (HF Conv1D-like GEMM)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 1}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(40, 64))

    def forward(self, x):
        return x @ self.weight.t()


def get_inputs():
    return [torch.randn(32, 64)]
