"""TRL's per-token log-probs (`selective_log_softmax`'s fallback): F.log_softmax(logits, -1),
torch.gather(.., dim=-1, index=labels.unsqueeze(-1)).squeeze(-1), negated to a per-token NLL and
kept per token: cross entropy with reduction "none"."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'cross_entropy',
            'params': {'loss': 'log_softmax + gather', 'reduction': 'none'}, 'calls': 1}


def selective_log_softmax(logits, index):
    logps = F.log_softmax(logits, dim=-1)
    return torch.gather(logps, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)


class Model(nn.Module):
    def forward(self, logits, labels):
        per_token_logps = selective_log_softmax(logits, labels)
        return -per_token_logps


def get_inputs():
    return [torch.randn(4, 64, 512), torch.randint(0, 512, (4, 64))]
