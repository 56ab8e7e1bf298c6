"""A ViT MLP calling `F.gelu(x, approximate='none')` with the default spelled out as a keyword,
between two linears."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'none'}, 'calls': 1,
            'also': ['matmul']}


class Mlp(nn.Module):
    def __init__(self, dim=384, hidden=1536):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate='none'))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Mlp()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 197, 384)]
