"""Baichuan2's NormHead (HF remote code): the LM head's weight is L2-normalized along its rows on
the fly (F.normalize(self.weight) in training), then F.linear(hidden, norm_weight), no bias; the
causal-LM loss shifts (logits[..., :-1, :], labels[..., 1:]) and runs CrossEntropyLoss over
view(-1, V). The head is a bias-free F.linear feeding the cross entropy: one linear_cross_entropy
call (its weight made in the forward)."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import CrossEntropyLoss

EXPECTED = {'kernel_type': 'linear_cross_entropy', 'params': {}, 'calls': 1}


class NormHead(nn.Module):
    def __init__(self, hidden_size, vocab_size):
        super().__init__()
        self.weight = nn.Parameter(torch.empty((vocab_size, hidden_size)))
        nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)

    def forward(self, hidden_states):
        norm_weight = nn.functional.normalize(self.weight)
        return F.linear(hidden_states, norm_weight)


class Model(nn.Module):
    def __init__(self, hidden_size=64, vocab_size=256):
        super().__init__()
        self.vocab_size = vocab_size
        self.lm_head = NormHead(hidden_size, vocab_size)

    def forward(self, hidden_states, labels):
        logits = self.lm_head(hidden_states)
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        loss_fct = CrossEntropyLoss()
        shift_logits = shift_logits.view(-1, self.vocab_size)
        shift_labels = shift_labels.view(-1)
        return loss_fct(shift_logits, shift_labels)


def get_inputs():
    return [torch.randn(2, 17, 64), torch.randint(0, 256, (2, 17))]
