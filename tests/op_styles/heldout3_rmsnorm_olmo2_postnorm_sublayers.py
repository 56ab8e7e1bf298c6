"""OLMo-2's decoder layer (HF Olmo2DecoderLayer): the norms come after each sublayer, inside the
residual branch: h = residual + post_attention_layernorm(self_attn(h)), then h = residual +
post_feedforward_layernorm(mlp(h)). Each norm reads a sublayer's output, never a residual sum:
two rmsnorm calls and no add_rmsnorm."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 2, 'also': ['matmul']}


class Olmo2RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight * hidden_states).to(input_dtype)


class Olmo2DecoderLayer(nn.Module):
    def __init__(self, hidden_size=32):
        super().__init__()
        self.self_attn_o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.mlp_down_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.post_attention_layernorm = Olmo2RMSNorm(hidden_size)
        self.post_feedforward_layernorm = Olmo2RMSNorm(hidden_size)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.self_attn_o_proj(hidden_states)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.mlp_down_proj(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Olmo2DecoderLayer()])

    def forward(self, hidden_states):
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return hidden_states


def get_inputs():
    return [torch.randn(2, 8, 32)]
