"""A rotary applied in [B, S, H, D] layout: tables [1, S, 1, D] broadcast over the heads."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'layout': 'BSHD'}, 'calls': 1}

def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self, seq=12, dim=16):
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(seq).float(), inv)
        emb = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", emb.cos()[None, :, None, :])
        self.register_buffer("sin", emb.sin()[None, :, None, :])

    def forward(self, x):
        return x * self.cos + rotate_half(x) * self.sin


def get_inputs():
    return [torch.randn(2, 12, 4, 16)]
