"""A look-alike of the gated MLP: HF T5DenseGatedActDense with feed_forward_proj="gated-relu"
(ReGLU): wo(relu(wi_0(x)) * wi_1(x)). The fused_mlp kernel's activations are silu, gelu and
gelu_tanh; a ReLU gate is none of them: no fused_mlp target, the three linears matmuls."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None, 'also': ['matmul']}


class T5DenseGatedActDense(nn.Module):
    def __init__(self, d_model=32, d_ff=64):
        super().__init__()
        self.wi_0 = nn.Linear(d_model, d_ff, bias=False)
        self.wi_1 = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(0.1)
        self.act = nn.ReLU()

    def forward(self, hidden_states):
        hidden_gelu = self.act(self.wi_0(hidden_states))
        hidden_linear = self.wi_1(hidden_states)
        hidden_states = hidden_gelu * hidden_linear
        hidden_states = self.dropout(hidden_states)
        return self.wo(hidden_states)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.DenseReluDense = T5DenseGatedActDense()

    def forward(self, x):
        return self.DenseReluDense(x)


def get_inputs():
    return [torch.randn(2, 8, 32)]
