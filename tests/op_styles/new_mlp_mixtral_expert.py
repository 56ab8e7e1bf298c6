"""Mixtral's expert (MixtralBlockSparseTop2MLP): w2(act_fn(w1(h)) * w3(h)) with nn.SiLU, times the routing weights."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {}, 'calls': 1}

class MixtralBlockSparseTop2MLP(nn.Module):
    def __init__(self, hidden_dim=32, ffn_dim=80):
        super().__init__()
        self.w1 = nn.Linear(hidden_dim, ffn_dim, bias=False)
        self.w2 = nn.Linear(ffn_dim, hidden_dim, bias=False)
        self.w3 = nn.Linear(hidden_dim, ffn_dim, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states, routing_weights):
        current_hidden_states = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        current_hidden_states = self.w2(current_hidden_states)
        return routing_weights * current_hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.expert = MixtralBlockSparseTop2MLP()

    def forward(self, x, w):
        return self.expert(x, w)


def get_inputs():
    return [torch.randn(14, 32), torch.rand(14, 1)]
