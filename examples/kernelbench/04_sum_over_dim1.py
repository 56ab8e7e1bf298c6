"""Sum over the middle dim: x.sum(dim=1, keepdim=True) for x [32, 4096, 256].

Op family: reduce, over a dim that is not the last: the profiler files it as a reduce target at
(M, N, K) = (32, 4096, 256) with axis 1, and verify routes the sum to a kernel verified over it.
"""

import torch
from torch import nn

BATCH, REDUCED, KEPT = 32, 4096, 256


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1, keepdim=True)


def get_inputs() -> list:
    return [torch.randn(BATCH, REDUCED, KEPT)]


def get_init_inputs() -> list:
    return []
