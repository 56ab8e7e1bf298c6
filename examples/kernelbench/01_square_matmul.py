"""Square GEMM: C = A @ B with A, B [4096, 4096] (KernelBench level 1 style).

Op family: matmul (`torch.matmul` on two inputs; 137 GFLOP per call). autokernel profiles one
matmul target at M = N = K = 4096. Verify routes matmul through `nn.Linear` modules only, so a
bare `torch.matmul` keeps PyTorch's GEMM end to end: the kernel is optimized and benchmarked, but
the model's speedup stays ~1x (the table shows the target as not routed).
"""

import torch
from torch import nn

N = 4096


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs() -> list:
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs() -> list:
    return []
