"""Llama 4's QK-norm (HF Llama4TextL2Norm, use_qk_norm): a weightless RMSNorm,
x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) computed on x.float() and .type_as(x), applied
to the query and key heads [B, S, H, D] (over head_dim) after the projections. Two calls."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 2, 'also': ['matmul']}


class Llama4TextL2Norm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x)


class Llama4QK(nn.Module):
    def __init__(self, hidden_size=64, num_heads=4):
        super().__init__()
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.qk_norm = Llama4TextL2Norm()

    def forward(self, hidden_states):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape)
        key_states = self.k_proj(hidden_states).view(*input_shape, -1, self.head_dim)
        query_states = self.qk_norm(query_states)
        key_states = self.qk_norm(key_states)
        return query_states.transpose(1, 2), key_states.transpose(1, 2)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Llama4QK()

    def forward(self, hidden_states):
        return self.self_attn(hidden_states)


def get_inputs():
    return [torch.randn(2, 8, 64)]
