"""HF Phi (phi-2)'s parallel decoder layer: residual = x; h = input_layernorm(x); attention and MLP
both read h; hidden = attn_out + ff_out + residual; then PhiModel's final_layernorm(hidden). The
last add (into the residual) feeds the final LayerNorm: one add_layernorm call. The input norm is a
layernorm of its own; the attention is stood in for by its dense projection; the MLP is fc1,
NewGELU (tanh), fc2."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'add_layernorm', 'params': {'eps': 1e-05}, 'calls': 1,
            'also': ['layernorm', 'matmul', 'gelu']}


class NewGELUActivation(nn.Module):
    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class PhiMLP(nn.Module):
    def __init__(self, hidden_size=32, intermediate_size=64):
        super().__init__()
        self.activation_fn = NewGELUActivation()
        self.fc1 = nn.Linear(hidden_size, intermediate_size)
        self.fc2 = nn.Linear(intermediate_size, hidden_size)

    def forward(self, hidden_states):
        hidden_states = self.fc1(hidden_states)
        hidden_states = self.activation_fn(hidden_states)
        return self.fc2(hidden_states)


class PhiDecoderLayer(nn.Module):
    def __init__(self, hidden_size=32):
        super().__init__()
        self.self_attn_dense = nn.Linear(hidden_size, hidden_size)
        self.mlp = PhiMLP(hidden_size)
        self.input_layernorm = nn.LayerNorm(hidden_size, eps=1e-5)
        self.resid_dropout = nn.Dropout(0.0)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        attn_outputs = self.self_attn_dense(hidden_states)
        attn_outputs = self.resid_dropout(attn_outputs)
        feed_forward_hidden_states = self.resid_dropout(self.mlp(hidden_states))
        hidden_states = attn_outputs + feed_forward_hidden_states + residual
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([PhiDecoderLayer()])
        self.final_layernorm = nn.LayerNorm(32, eps=1e-5)

    def forward(self, hidden_states):
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states)
        return self.final_layernorm(hidden_states)


def get_inputs():
    return [torch.randn(2, 8, 32)]
