"""IBM Granite's causal-LM head and loss (HF GraniteForCausalLM): logits = lm_head(h) then divided
by config.logits_scaling (8.0), the loss F.cross_entropy over the shifted logits upcast to float
(view(-1, V)) against the shifted labels, ignore_index -100. The loss reads the scaled logits,
not the head's output, so no LM-head kernel can stand in for head + loss: the head is a matmul,
the loss a cross_entropy."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'cross_entropy', 'params': {}, 'calls': 1, 'also': ['matmul']}


class Model(nn.Module):
    def __init__(self, hidden_size=64, vocab_size=256, logits_scaling=8.0):
        super().__init__()
        self.vocab_size = vocab_size
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)
        self.logits_scaling = logits_scaling

    def forward(self, hidden_states, labels):
        logits = self.lm_head(hidden_states)
        logits = logits / self.logits_scaling
        logits = logits.float()
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        return F.cross_entropy(shift_logits.view(-1, self.vocab_size), shift_labels.view(-1),
                               ignore_index=-100, reduction="mean")


def get_inputs():
    return [torch.randn(2, 17, 64), torch.randint(0, 256, (2, 17))]
