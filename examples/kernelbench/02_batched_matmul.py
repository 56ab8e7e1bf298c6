"""Batched GEMM: C[b] = A[b] @ B[b] with A [64, 512, 2048], B [64, 2048, 1024].

Op family: matmul, batched (`torch.bmm`; 137 GFLOP per call). autokernel profiles a matmul
target at M=512, N=1024, K=2048 with a batch of 64 noted; the matmul kernel type is a single 2-D
GEMM, so the batch is a loop the kernel does not cover and verify routes nothing (bmm is not
routed): the kernel is optimized at one batch element's shape, the model runs PyTorch's bmm.
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
