"""GQA by repeat_interleave over the heads before a causal SDPA."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'kv_heads': 2}, 'calls': 1, 'route': 'call'}

class Model(nn.Module):
    def forward(self, q, k, v):
        k = k.repeat_interleave(4, dim=1)
        v = v.repeat_interleave(4, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    return [torch.randn(1, 8, 32, 16), torch.randn(1, 2, 32, 16), torch.randn(1, 2, 32, 16)]
