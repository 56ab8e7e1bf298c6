"""Cross-entropy loss of language-model logits: F.cross_entropy(logits [4096, 50257], targets).

Op family: cross_entropy (mean over 4096 tokens of a 50257-way softmax, GPT-2's vocabulary;
400 MB of fp16 logits read once). The integer targets stay int64. Verify routes the functional
call to the kernel.
"""

import torch
import torch.nn.functional as F
from torch import nn

TOKENS, VOCAB = 4096, 50257


class Model(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs() -> list:
    return [torch.randn(TOKENS, VOCAB), torch.randint(0, VOCAB, (TOKENS,))]


def get_init_inputs() -> list:
    return []
