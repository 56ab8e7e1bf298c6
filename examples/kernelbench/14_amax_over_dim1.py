"""Max over the middle dim: x.amax(dim=1, keepdim=True) for x [16, 8192, 128].

Op family: reduce with params.op "amax", over a dim that is not the last: the profiler files it as
a reduce (amax) target at (M, N, K) = (16, 8192, 128) with axis 1, and verify routes the amax. (A
torch.max(x, dim) also returns the indices, which no reduce kernel computes: it stays PyTorch's.)
"""

import torch
from torch import nn

BATCH, REDUCED, KEPT = 16, 8192, 128


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.amax(dim=1, keepdim=True)


def get_inputs() -> list:
    return [torch.randn(BATCH, REDUCED, KEPT)]


def get_init_inputs() -> list:
    return []
