"""A language model's head and its training loss: F.cross_entropy(lm_head(h), targets).

Op family: linear_cross_entropy (4096 tokens of hidden size 2048 through a bias-free
[32000, 2048] head, then the mean cross-entropy; LLaMA-2's vocabulary at a 1B-class width).
Eager PyTorch writes the 4096 x 32000 logits (250 MB in fp16) and reads them back for the loss,
and its backward holds a float32 softmax of the same size; the fused kernel keeps an online
logsumexp per row and never writes them. Some targets are -100 (padding), as in a real batch.
Verify defers the head's output into the loss and runs the fused kernel on the hidden state.
"""

import torch
import torch.nn.functional as F
from torch import nn

TOKENS, HIDDEN, VOCAB = 4096, 2048, 32000


class Model(nn.Module):
    def __init__(self, hidden: int = HIDDEN, vocab: int = VOCAB) -> None:
        super().__init__()
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def inputs_for(tokens: int, hidden: int, vocab: int) -> list:
    targets = torch.randint(0, vocab, (tokens,))
    targets[torch.rand(tokens) < 0.1] = -100
    return [torch.randn(tokens, hidden), targets]


def get_inputs() -> list:
    return inputs_for(TOKENS, HIDDEN, VOCAB)


def get_init_inputs() -> list:
    return [HIDDEN, VOCAB]
