"""DBRX's expert GLU (HF DbrxExpertGLU): raw [E·F, D] parameters w1, v1, w2 viewed per expert
(w1.view(E, F, D)[e]), x.matmul(w1.t()), x.matmul(v1.t()), activation_fn (SiLU) on the gate,
product, .matmul(w2) with w2 used untransposed. One expert applied to every token here."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {}, 'calls': 1}


class DbrxExpertGLU(nn.Module):
    def __init__(self, hidden_size, ffn_hidden_size, moe_num_experts):
        super().__init__()
        self.hidden_size = hidden_size
        self.ffn_hidden_size = ffn_hidden_size
        self.moe_num_experts = moe_num_experts
        self.w1 = nn.Parameter(torch.randn(moe_num_experts * ffn_hidden_size, hidden_size) * 0.1)
        self.v1 = nn.Parameter(torch.randn(moe_num_experts * ffn_hidden_size, hidden_size) * 0.1)
        self.w2 = nn.Parameter(torch.randn(moe_num_experts * ffn_hidden_size, hidden_size) * 0.1)
        self.activation_fn = nn.SiLU()

    def forward(self, x, expert_w1, expert_v1, expert_w2):
        gate_proj = x.matmul(expert_w1.t())
        up_proj = x.matmul(expert_v1.t())
        gate_proj = self.activation_fn(gate_proj)
        intermediate_states = gate_proj * up_proj
        down_proj = intermediate_states.matmul(expert_w2)
        return down_proj


class DbrxExperts(nn.Module):
    def __init__(self, hidden_size=32, ffn_hidden_size=64, moe_num_experts=1):
        super().__init__()
        self.moe_num_experts = moe_num_experts
        self.mlp = DbrxExpertGLU(hidden_size, ffn_hidden_size, moe_num_experts)

    def forward(self, x):
        shape = (self.mlp.moe_num_experts, self.mlp.ffn_hidden_size, self.mlp.hidden_size)
        w1_chunked = self.mlp.w1.view(shape)
        v1_chunked = self.mlp.v1.view(shape)
        w2_chunked = self.mlp.w2.view(shape)
        expert_idx = 0
        return self.mlp(x, w1_chunked[expert_idx], v1_chunked[expert_idx], w2_chunked[expert_idx])


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = DbrxExperts()

    def forward(self, x):
        return self.experts(x)


def get_inputs():
    return [torch.randn(16, 32)]
