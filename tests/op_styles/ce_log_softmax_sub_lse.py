"""log_softmax written x - x.logsumexp(-1, keepdim=True), then gather, negated mean."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'cross_entropy', 'params': {'loss': 'log_softmax + gather'}, 'calls': 1}

class Model(nn.Module):
    def forward(self, x, t):
        logp = x - x.logsumexp(dim=-1, keepdim=True)
        return -(logp.gather(1, t.view(-1, 1))).mean()


def get_inputs():
    return [torch.randn(20, 70), torch.randint(0, 70, (20,))]
