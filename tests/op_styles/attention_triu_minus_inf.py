"""Causal mask made in forward with torch.full(-inf).triu(1), added to the scores."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1}

class Model(nn.Module):
    def forward(self, q, k, v):
        seqlen = q.shape[2]
        mask = torch.full((seqlen, seqlen), float("-inf")).triu(1)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1])
        scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(q)
        return torch.matmul(scores, v)


def get_inputs():
    return [torch.randn(2, 4, 16, 8) for _ in range(3)]
