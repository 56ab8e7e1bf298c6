"""HF GPT-2's Conv1D: torch.addmm(bias, x.view(-1, x.size(-1)), weight) with a [in, out] weight, viewed back."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 1}

class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = Conv1D(96, 32)

    def forward(self, x):
        return self.c_attn(x)


def get_inputs():
    return [torch.randn(2, 10, 32)]
