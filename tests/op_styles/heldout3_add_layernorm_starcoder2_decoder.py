"""StarCoder2's decoder layer (HF Starcoder2DecoderLayer) with the model's final norm: nn.LayerNorm
with bias, eps norm_epsilon (1e-5); residual = h; h = input_layernorm(h); attention (its o_proj
standing in); h = residual + h; residual = h; h = post_attention_layernorm(h); MLP (c_fc,
gelu tanh, c_proj); h = residual + h; then Starcoder2Model.norm(h). The post-attention norm and
the final norm each read a residual sum: two add_layernorm calls; the input norm is a layernorm."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'add_layernorm', 'params': {'eps': 1e-05}, 'calls': 2,
            'also': ['layernorm', 'matmul', 'gelu']}


class Starcoder2MLP(nn.Module):
    def __init__(self, hidden_size=32, intermediate_size=128):
        super().__init__()
        self.c_fc = nn.Linear(hidden_size, intermediate_size)
        self.c_proj = nn.Linear(intermediate_size, hidden_size)

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = nn.functional.gelu(hidden_states, approximate="tanh")
        return self.c_proj(hidden_states)


class Starcoder2DecoderLayer(nn.Module):
    def __init__(self, hidden_size=32, norm_epsilon=1e-5):
        super().__init__()
        self.o_proj = nn.Linear(hidden_size, hidden_size)
        self.mlp = Starcoder2MLP(hidden_size)
        self.input_layernorm = nn.LayerNorm(hidden_size, eps=norm_epsilon)
        self.post_attention_layernorm = nn.LayerNorm(hidden_size, eps=norm_epsilon)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.o_proj(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Starcoder2DecoderLayer()])
        self.norm = nn.LayerNorm(32, eps=1e-5)

    def forward(self, hidden_states):
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return self.norm(hidden_states)


def get_inputs():
    return [torch.randn(2, 8, 32)]
