"""Sampling-style logits: `logits /= temperature` in place, then `F.softmax(logits, dim=-1)`
over a [B, V] vocabulary."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'route': 'call'}


class Model(nn.Module):
    def __init__(self, temperature=0.7):
        super().__init__()
        self.temperature = temperature

    def forward(self, logits):
        logits = logits.clone()
        logits /= self.temperature
        return F.softmax(logits, dim=-1)


def get_inputs():
    return [torch.randn(16, 32000)]
