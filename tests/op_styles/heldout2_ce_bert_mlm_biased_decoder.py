"""BERT's MLM loss (HF BertLMPredictionHead + BertForMaskedLM): decoder = nn.Linear(hidden, vocab,
bias=False) with a separate bias Parameter tied in (decoder.bias = self.bias), then
CrossEntropyLoss()(prediction_scores.view(-1, V), labels.view(-1)). The head has a bias, so it is
no bias-free LM head: a cross entropy of its own beside the decoder's GEMM."""

import torch
from torch import nn
from torch.nn import CrossEntropyLoss

EXPECTED = {'kernel_type': 'cross_entropy', 'params': {}, 'calls': 1, 'also': ['matmul']}


class BertLMPredictionHead(nn.Module):
    def __init__(self, hidden_size=32, vocab_size=64):
        super().__init__()
        self.decoder = nn.Linear(hidden_size, vocab_size, bias=False)
        self.bias = nn.Parameter(torch.randn(vocab_size) * 0.1)
        self.decoder.bias = self.bias

    def forward(self, hidden_states):
        return self.decoder(hidden_states)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.predictions = BertLMPredictionHead()
        self.vocab_size = 64

    def forward(self, sequence_output, labels):
        prediction_scores = self.predictions(sequence_output)
        loss_fct = CrossEntropyLoss()
        return loss_fct(prediction_scores.view(-1, self.vocab_size), labels.view(-1))


def get_inputs():
    return [torch.randn(2, 8, 32), torch.randint(0, 64, (2, 8))]
