"""T5's feed-forward sublayers stacked (HF T5LayerFF, T5DenseActDense with ReLU) and the stack's
final_layer_norm: each sublayer normalizes with T5LayerNorm (fp32 variance, no mean, weight *),
and adds its output back (hidden + dropout(ff)). The first norm reads the input (an rmsnorm); the
second sublayer's norm and the final norm each read a residual sum: two add_rmsnorm calls."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'add_rmsnorm', 'params': {'eps': 1e-06}, 'calls': 2,
            'also': ['rmsnorm', 'matmul']}


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class T5DenseActDense(nn.Module):
    def __init__(self, d_model=32, d_ff=64):
        super().__init__()
        self.wi = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(0.1)
        self.act = nn.ReLU()

    def forward(self, hidden_states):
        hidden_states = self.wi(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return self.wo(hidden_states)


class T5LayerFF(nn.Module):
    def __init__(self, d_model=32):
        super().__init__()
        self.DenseReluDense = T5DenseActDense(d_model)
        self.layer_norm = T5LayerNorm(d_model)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states):
        forwarded_states = self.layer_norm(hidden_states)
        forwarded_states = self.DenseReluDense(forwarded_states)
        hidden_states = hidden_states + self.dropout(forwarded_states)
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.ModuleList([T5LayerFF(), T5LayerFF()])
        self.final_layer_norm = T5LayerNorm(32)

    def forward(self, hidden_states):
        for layer in self.block:
            hidden_states = layer(hidden_states)
        return self.final_layer_norm(hidden_states)


def get_inputs():
    return [torch.randn(2, 8, 32)]
