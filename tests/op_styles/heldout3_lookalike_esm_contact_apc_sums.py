"""ESM's contact-prediction head (HF EsmContactPredictionHead): the stacked attention maps
[B, C, L, L] symmetrized (x + x.transpose(-1, -2)) and average-product corrected (apc): a1 =
x.sum(-1, keepdims=True), a2 = x.sum(-2, keepdims=True), a12 = x.sum((-1, -2), keepdims=True),
avg = a1 * a2, avg.div_(a12), x - avg. Three sums: over the last dim, over the one before it,
and over the two trailing dims together (65536 elements, 1024 rows). Each sum only normalizes
the tensor it sums (x - a1·a2 / a12), as `w / w.sum(-1)` does (r3_lookalike_sum_normalize): a
piece of a normalization no kernel type computes, never a reduce target of its own (corrected
after the held-out run: the first expectation, three reduce calls, was not what the style set
says)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None, 'also': ['matmul']}


def symmetrize(x):
    return x + x.transpose(-1, -2)


def average_product_correct(x):
    a1 = x.sum(-1, keepdims=True)
    a2 = x.sum(-2, keepdims=True)
    a12 = x.sum((-1, -2), keepdims=True)
    avg = a1 * a2
    avg.div_(a12)
    normalized = x - avg
    return normalized


class EsmContactPredictionHead(nn.Module):
    def __init__(self, in_features=16):
        super().__init__()
        self.regression = nn.Linear(in_features, 1, bias=True)
        self.activation = nn.Sigmoid()

    def forward(self, attentions):
        batch_size, channels, seqlen, _ = attentions.size()
        attentions = average_product_correct(symmetrize(attentions))
        attentions = attentions.permute(0, 2, 3, 1)
        return self.activation(self.regression(attentions).squeeze(3))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.contact_head = EsmContactPredictionHead()

    def forward(self, attentions):
        return self.contact_head(attentions)


def get_inputs():
    return [torch.rand(1, 16, 64, 64)]
