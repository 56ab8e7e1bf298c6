"""HF causal-LM loss: lm_head, logits[..., :-1, :].contiguous(), labels[..., 1:], .float(), CrossEntropyLoss."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'linear_cross_entropy', 'params': {}, 'calls': 1, 'route': 'call chain'}

class Model(nn.Module):
    def __init__(self, vocab=80, dim=32):
        super().__init__()
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, hidden_states, labels):
        logits = self.lm_head(hidden_states).float()
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        return F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))


def get_inputs():
    return [torch.randn(2, 12, 32), torch.randint(0, 80, (2, 12))]
