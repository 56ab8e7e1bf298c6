"""SDPA given a constant causal bool mask as attn_mask (causal, but verify refuses attn_mask)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1, 'route': 'no'}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("causal", torch.ones(24, 24, dtype=torch.bool).tril())

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.causal)


def get_inputs():
    return [torch.randn(2, 2, 24, 16) for _ in range(3)]
