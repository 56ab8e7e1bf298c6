"""`x @ self.weight.T + self.bias` (a hand-written linear, as in minimal from-scratch models)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 1}


class Linear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / in_features ** 0.5)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return x @ self.weight.T + self.bias


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = Linear(128, 96)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(4, 32, 128)]
