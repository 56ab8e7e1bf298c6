"""Attention with a very large head dim: SDPA of q, k, v [8, 32, 512, 1024], not causal.

Op family: flash_attention at B=8, H=32, S=512, D=1024 (each of q, k, v is 256 MB in fp16).
A head dim of 1024 is far beyond the 64-256 that flash-attention kernels tile for: a q tile and
a k tile of 1024 columns do not fit shared memory at usual block sizes, so the starter may fail
or be slow there. Verify routes the functional SDPA call to the kernel.
"""

import torch
import torch.nn.functional as F
from torch import nn

BATCH, HEADS, SEQ_LEN, HEAD_DIM = 8, 32, 512, 1024


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs() -> list:
    shape = (BATCH, HEADS, SEQ_LEN, HEAD_DIM)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs() -> list:
    return []
