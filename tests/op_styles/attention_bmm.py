"""fairseq-style bmm attention on [B*H, S, D]: bmm(q * scaling, k.transpose(1, 2)), softmax, bmm."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': False}, 'calls': 1}

class Model(nn.Module):
    def forward(self, q, k, v):
        scaling = q.size(-1) ** -0.5
        attn_weights = torch.bmm(q * scaling, k.transpose(1, 2))
        attn_probs = F.softmax(attn_weights, dim=-1)
        return torch.bmm(attn_probs, v)


def get_inputs():
    return [torch.randn(8, 20, 16) for _ in range(3)]
