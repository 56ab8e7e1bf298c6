"""ALBERT's cross-layer sharing: one layer module applied `num_hidden_layers` times in a Python
loop (`for _ in range(2): h = self.albert_layer(h)`), each a post-norm
`self.full_layer_layer_norm(ffn_output + h)`: the add + LayerNorm is one target of 2 calls."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'add_layernorm', 'params': {'eps': 1e-12}, 'calls': 2,
            'also': ['matmul', 'gelu']}


class AlbertLayer(nn.Module):
    def __init__(self, hidden=512, intermediate=2048):
        super().__init__()
        self.full_layer_layer_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn = nn.Linear(hidden, intermediate)
        self.ffn_output = nn.Linear(intermediate, hidden)

    def forward(self, hidden_states):
        ffn_output = self.ffn_output(F.gelu(self.ffn(hidden_states)))
        return self.full_layer_layer_norm(ffn_output + hidden_states)


class Model(nn.Module):
    def __init__(self, num_hidden_layers=2):
        super().__init__()
        self.num_hidden_layers = num_hidden_layers
        self.albert_layer = AlbertLayer()

    def forward(self, hidden_states):
        for _ in range(self.num_hidden_layers):
            hidden_states = self.albert_layer(hidden_states)
        return hidden_states


def get_inputs():
    return [torch.randn(2, 128, 512)]
