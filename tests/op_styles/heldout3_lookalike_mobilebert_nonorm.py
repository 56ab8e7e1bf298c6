"""MobileBERT's NoNorm (HF NoNorm, normalization_type "no_norm"): where BERT has a LayerNorm,
MobileBERT multiplies by a weight and adds a bias, input_tensor * self.weight + self.bias, here
after the bottleneck output's residual add (MobileBertOutput: LayerNorm(dense(x) + residual)).
No mean, no variance: no layernorm, no add_layernorm; the dense layer is a matmul."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None, 'also': ['matmul']}


class NoNorm(nn.Module):
    def __init__(self, feat_size, eps=None):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(feat_size))
        self.weight = nn.Parameter(torch.ones(feat_size))

    def forward(self, input_tensor):
        return input_tensor * self.weight + self.bias


class OutputBottleneck(nn.Module):
    def __init__(self, intermediate_size=128, hidden_size=32):
        super().__init__()
        self.dense = nn.Linear(intermediate_size, hidden_size)
        self.LayerNorm = NoNorm(hidden_size)
        self.dropout = nn.Dropout(0.0)

    def forward(self, intermediate_states, residual_tensor):
        layer_output = self.dense(intermediate_states)
        layer_output = self.dropout(layer_output)
        layer_output = self.LayerNorm(layer_output + residual_tensor)
        return layer_output


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.output = OutputBottleneck()

    def forward(self, intermediate_states, residual_tensor):
        return self.output(intermediate_states, residual_tensor)


def get_inputs():
    return [torch.randn(2, 16, 128), torch.randn(2, 16, 32)]
