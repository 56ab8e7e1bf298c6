"""Gemma 2's head: lm_head(h), final logit soft-capping tanh(logits / 30) * 30, then F.cross_entropy.
The cap sits between head and loss, so no linear_cross_entropy: a cross_entropy and the head's matmul."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'cross_entropy', 'params': {}, 'calls': 1, 'also': ['matmul']}

class Model(nn.Module):
    def __init__(self, dim=32, vocab=80, final_logit_softcapping=30.0):
        super().__init__()
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.final_logit_softcapping = final_logit_softcapping

    def forward(self, hidden_states, labels):
        logits = self.lm_head(hidden_states)
        logits = logits / self.final_logit_softcapping
        logits = torch.tanh(logits)
        logits = logits * self.final_logit_softcapping
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.view(-1))


def get_inputs():
    return [torch.randn(2, 8, 32), torch.randint(0, 80, (2, 8))]
