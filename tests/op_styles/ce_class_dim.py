"""F.cross_entropy on [B, C, S] logits (class dim 1): the route takes [N, V] only."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'cross_entropy', 'params': {'logits_rank': 3}, 'calls': 1, 'route': 'no'}

class Model(nn.Module):
    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(4, 40, 12), torch.randint(0, 40, (4, 12))]
