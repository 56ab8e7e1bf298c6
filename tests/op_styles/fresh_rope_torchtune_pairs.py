"""torchtune-style RoPE: pairs x[..., 0] / x[..., 1] times a [S, D/2, 2] cache, stacked and flattened."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {}, 'calls': 1}

class Model(nn.Module):
    def __init__(self, seq=10, dim=16):
        super().__init__()
        theta = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        idx_theta = torch.outer(torch.arange(seq).float(), theta)
        self.register_buffer("cache", torch.stack([idx_theta.cos(), idx_theta.sin()], dim=-1))

    def forward(self, x):
        xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
        rope_cache = self.cache.view(1, x.shape[1], 1, xshaped.size(3), 2)
        x_out = torch.stack([
            xshaped[..., 0] * rope_cache[..., 0] - xshaped[..., 1] * rope_cache[..., 1],
            xshaped[..., 1] * rope_cache[..., 0] + xshaped[..., 0] * rope_cache[..., 1],
        ], -1)
        return x_out.flatten(3).type_as(x)


def get_inputs():
    return [torch.randn(2, 10, 3, 16)]
