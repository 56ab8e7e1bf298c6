"""A look-alike of a softmax: Evan Miller's "softmax_1" (quiet attention, "Attention Is Off By One"),
exp(x - m) / (exp(-m) + sum(exp(x - m))), i.e. exp(x) / (1 + sum exp(x)): the weights sum to less
than one. Not a softmax: no target, and its max and sum are pieces of it, no reduce targets."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None}


def softmax_1(x, dim=-1):
    m = x.max(dim=dim, keepdim=True).values
    exp_x = torch.exp(x - m)
    return exp_x / (torch.exp(-m) + exp_x.sum(dim=dim, keepdim=True))


class Model(nn.Module):
    def forward(self, scores):
        return softmax_1(scores, dim=-1)


def get_inputs():
    return [torch.randn(2, 4, 8, 8)]
