"""ChatGLM2/3's MLP: dense_h_to_4h (one bias-free linear to 2·ffn), swiglu as
x = torch.chunk(x, 2, dim=-1); F.silu(x[0]) * x[1] (the chunk tuple indexed), dense_4h_to_h."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {'fused': 'gate_up'}, 'calls': 1}


def swiglu(x):
    x = torch.chunk(x, 2, dim=-1)
    return F.silu(x[0]) * x[1]


class MLP(nn.Module):
    def __init__(self, hidden_size=32, ffn_hidden_size=64, add_bias_linear=False):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(hidden_size, ffn_hidden_size * 2, bias=add_bias_linear)
        self.activation_func = swiglu
        self.dense_4h_to_h = nn.Linear(ffn_hidden_size, hidden_size, bias=add_bias_linear)

    def forward(self, hidden_states):
        intermediate_parallel = self.dense_h_to_4h(hidden_states)
        intermediate_parallel = self.activation_func(intermediate_parallel)
        output = self.dense_4h_to_h(intermediate_parallel)
        return output


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(8, 2, 32)]
