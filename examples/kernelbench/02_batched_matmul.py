"""Batched GEMM: C[b] = A[b] @ B[b] with A [64, 512, 2048], B [64, 2048, 1024].

Op family: matmul, batched (`torch.bmm`; 137 GFLOP per call). autokernel profiles a matmul
target of role "batched" at B=64, M=512, N=1024, K=2048; the matmul kernel is batched like
torch.matmul (one launch over every batch element), and verify routes the model's `torch.bmm`
to it.
"""

import torch
from torch import nn

BATCH, M, K, N = 64, 512, 2048, 1024


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs() -> list:
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs() -> list:
    return []
