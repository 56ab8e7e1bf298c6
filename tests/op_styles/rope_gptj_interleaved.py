"""GPT-J's rotate_every_two: stack((-x2, x1), -1).flatten(-2) with repeat_interleave'd tables."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'interleaved'}, 'calls': 1, 'route': 'no'}

def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


class Model(nn.Module):
    def __init__(self, seq=10, dim=16):
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(seq).float(), inv)
        self.register_buffer("sin", angles.sin().repeat_interleave(2, dim=-1)[None, :, None, :])
        self.register_buffer("cos", angles.cos().repeat_interleave(2, dim=-1)[None, :, None, :])

    def forward(self, x):
        return (x * self.cos) + (rotate_every_two(x) * self.sin)


def get_inputs():
    return [torch.randn(2, 10, 3, 16)]
