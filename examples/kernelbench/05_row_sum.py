"""Row sums: x.sum(dim=-1) for x [8192, 8192].

Op family: reduce over the last dim, the reduce kernel type's own layout (M=8192 rows of
N=8192; 128 MB in fp16, a pure bandwidth problem). Verify routes the call (a functional sum over
the last dim) to the kernel.
"""

import torch
from torch import nn

ROWS, COLS = 8192, 8192


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=-1)


def get_inputs() -> list:
    return [torch.randn(ROWS, COLS)]


def get_init_inputs() -> list:
    return []
