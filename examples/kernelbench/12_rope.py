"""Rotary position embedding of q and k [8, 32, 2048, 128] by a rotary module (rotate-half).

Op family: rotary_embedding. The module holds cos/sin tables [max_seq_len, 128] and applies
q·cos + rotate_half(q)·sin (and the same to k), with rotate_half(x) = cat(-x2, x1): the layout of
LLaMA and Mistral. Each of q and k is 128 MB in fp16, so this is bandwidth bound. Verify routes
the module to the kernel after probing that its forward computes the reference.
"""

import torch
from torch import nn

BATCH, HEADS, SEQ_LEN, HEAD_DIM = 8, 32, 2048, 128
THETA = 10000.0


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, max_seq_len: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_seq_len).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq_len = q.shape[-2]
        cos, sin = self.cos[:seq_len], self.sin[:seq_len]
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class Model(nn.Module):
    def __init__(self, head_dim: int = HEAD_DIM, max_seq_len: int = SEQ_LEN,
                 theta: float = THETA) -> None:
        super().__init__()
        self.rotary = RotaryEmbedding(head_dim, max_seq_len, theta)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rotary(q, k)


def get_inputs() -> list:
    shape = (BATCH, HEADS, SEQ_LEN, HEAD_DIM)
    return [torch.randn(shape), torch.randn(shape)]


def get_init_inputs() -> list:
    return [HEAD_DIM, SEQ_LEN, THETA]
