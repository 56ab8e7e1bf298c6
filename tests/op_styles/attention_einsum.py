"""einsum attention (ViT style): einsum('bhid,bhjd->bhij') * scale, softmax, einsum back."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': False}, 'calls': 1, 'route': 'no'}

class Model(nn.Module):
    def forward(self, q, k, v):
        dots = torch.einsum("bhid,bhjd->bhij", q, k) * (q.shape[-1] ** -0.5)
        attn = dots.softmax(dim=-1)
        return torch.einsum("bhij,bhjd->bhid", attn, v)


def get_inputs():
    return [torch.randn(2, 4, 18, 16) for _ in range(3)]
