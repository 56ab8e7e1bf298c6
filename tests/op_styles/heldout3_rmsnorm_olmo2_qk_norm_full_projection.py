"""OLMo-2's QK-norm (HF Olmo2Attention): q_norm and k_norm are RMSNorms over the whole projection
width (num_heads * head_dim), applied to q_proj(x) and k_proj(x) before the view into heads;
Olmo2RMSNorm upcasts to float32, rsqrt(mean(x²) + eps), and returns (weight * x).to(dtype)."""

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


class Olmo2QK(nn.Module):
    def __init__(self, hidden_size=64, num_heads=4):
        super().__init__()
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.q_norm = Olmo2RMSNorm(hidden_size)
        self.k_norm = Olmo2RMSNorm(hidden_size)

    def forward(self, hidden_states):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_norm(self.q_proj(hidden_states))
        key_states = self.k_norm(self.k_proj(hidden_states))
        query_states = query_states.view(hidden_shape).transpose(1, 2)
        key_states = key_states.view(hidden_shape).transpose(1, 2)
        return query_states, key_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Olmo2QK()

    def forward(self, hidden_states):
        return self.self_attn(hidden_states)


def get_inputs():
    return [torch.randn(2, 8, 64)]
