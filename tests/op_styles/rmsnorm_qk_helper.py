"""QK-norm written as a helper function applied to q and k inside an attention-free block."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 2}

def rms_norm(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


class QKNorm(nn.Module):
    def forward(self, q, k):
        q, k = rms_norm(q), rms_norm(k)
        return q + k


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.qk = QKNorm()

    def forward(self, q, k):
        return self.qk(q, k)


def get_inputs():
    return [torch.randn(2, 4, 16, 32), torch.randn(2, 4, 16, 32)]
