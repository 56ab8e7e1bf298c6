"""Sum over the middle dim: x.sum(dim=1, keepdim=True) for x [32, 4096, 256].

Op family: reduce, over a dim that is not the last. The reduce kernel type sums the last dim
only, so the profiler files this sum under "other" and the problem has no optimizable target
today; the kernelbench table says so.
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
