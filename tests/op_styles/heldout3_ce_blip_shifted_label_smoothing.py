"""BLIP's text decoder loss (HF BlipTextLMHeadModel): shifted_prediction_scores =
prediction_scores[:, :-1, :].contiguous(), labels[:, 1:], CrossEntropyLoss(reduction="mean",
label_smoothing=0.1) over view(-1, vocab_size). The prediction scores are the model's input."""

import torch
from torch import nn
from torch.nn import CrossEntropyLoss

EXPECTED = {'kernel_type': 'cross_entropy', 'params': {'label_smoothing': 0.1}, 'calls': 1}


class Model(nn.Module):
    def __init__(self, vocab_size=512):
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, prediction_scores, labels):
        shifted_prediction_scores = prediction_scores[:, :-1, :].contiguous()
        labels = labels[:, 1:].contiguous().to(shifted_prediction_scores.device)
        loss_fct = CrossEntropyLoss(reduction="mean", label_smoothing=0.1)
        return loss_fct(shifted_prediction_scores.view(-1, self.vocab_size), labels.view(-1))


def get_inputs():
    return [torch.randn(4, 33, 512), torch.randint(0, 512, (4, 33))]
