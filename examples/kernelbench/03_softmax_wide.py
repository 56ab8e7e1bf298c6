"""Softmax over a wide last dim: softmax(x, dim=1) for x [64, 65536].

Op family: softmax. With a 2-D input dim=1 is the last dim, so this is the softmax kernel type
at M=64 rows of N=65536 (one row is 128 KB in fp16: too wide for a one-block-per-row kernel
that holds the row in registers, which is what makes the problem interesting). Verify routes the
call (a functional softmax) to the kernel.
"""

import torch
from torch import nn

ROWS, COLS = 64, 65536


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs() -> list:
    return [torch.randn(ROWS, COLS)]


def get_init_inputs() -> list:
    return []
