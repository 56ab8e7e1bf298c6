"""Nemotron's MLP (HF NemotronMLP): down_proj(act_fn(up_proj(x))) with ACT2FN["relu2"]
(ReLUSquaredActivation: torch.square(F.relu(x))). Ungated (one input projection), and its
activation is no GELU: no fused_mlp, no gelu; the projections are matmuls."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': None, 'also': ['matmul']}


class ReLUSquaredActivation(nn.Module):
    def forward(self, input):
        relu_applied = F.relu(input)
        squared = torch.square(relu_applied)
        return squared


class NemotronMLP(nn.Module):
    def __init__(self, hidden_size=64, intermediate_size=256):
        super().__init__()
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.act_fn = ReLUSquaredActivation()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.up_proj(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = NemotronMLP()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 16, 64)]
