"""A GLU feed-forward with `self.act = nn.SiLU(inplace=True)` applied to the gate projection
(`self.act(self.gate(x)) * self.up(x)`), then the down projection."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {}, 'calls': 1}


class GluMlp(nn.Module):
    def __init__(self, dim=512, hidden=1376):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x):
        return self.down(self.act(self.gate(x)) * self.up(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = GluMlp()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 128, 512)]
