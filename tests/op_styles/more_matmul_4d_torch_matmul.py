"""torch.matmul on two 4-D tensors ([B, H, S, D] @ [B, H, D, T]): a batched GEMM, nothing after it."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 1}


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(2, 4, 64, 32), torch.randn(2, 4, 32, 48)]
