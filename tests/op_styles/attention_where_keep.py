"""torch.where(causal_keep, scores, finfo.min) with a tril bool buffer (HF GPT-2)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(20, 20, dtype=torch.bool)).view(1, 1, 20, 20))

    def forward(self, q, k, v):
        w = torch.matmul(q, k.transpose(-1, -2)) / (v.size(-1) ** 0.5)
        mask_value = torch.finfo(w.dtype).min
        w = torch.where(self.bias[:, :, :20, :20], w, torch.full([], mask_value, dtype=w.dtype))
        return torch.matmul(nn.functional.softmax(w, dim=-1), v)


def get_inputs():
    return [torch.randn(2, 3, 20, 16) for _ in range(3)]
