"""Mean over the middle dim: torch.mean(x, dim=1) for x [32, 4096, 256].

Op family: reduce with params.op "mean", over a dim that is not the last: the profiler files it as
a reduce (mean) target at (M, N, K) = (32, 4096, 256) with axis 1, and verify routes torch.mean to
a kernel verified as a mean over that dim (never a sum's kernel).
"""

import torch
from torch import nn

BATCH, REDUCED, KEPT = 32, 4096, 256


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=1)


def get_inputs() -> list:
    return [torch.randn(BATCH, REDUCED, KEPT)]


def get_init_inputs() -> list:
    return []
