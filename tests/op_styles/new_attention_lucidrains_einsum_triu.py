"""lucidrains-style attention: einsum('b h i d, b h j d -> b h i j') * scale, a causal mask built in forward
as torch.ones(i, j).triu(j - i + 1).bool(), masked_fill(-finfo.max), softmax, einsum back."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1}

class Attention(nn.Module):
    def __init__(self, dim_head=16):
        super().__init__()
        self.scale = dim_head ** -0.5

    def forward(self, q, k, v):
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.scale
        i, j = sim.shape[-2:]
        causal_mask = torch.ones((i, j), dtype=torch.bool, device=sim.device).triu(j - i + 1)
        sim = sim.masked_fill(causal_mask, -torch.finfo(sim.dtype).max)
        attn = sim.softmax(dim=-1)
        return torch.einsum("b h i j, b h j d -> b h i d", attn, v)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, q, k, v):
        return self.attn(q, k, v)


def get_inputs():
    return [torch.randn(2, 4, 10, 16) for _ in range(3)]
