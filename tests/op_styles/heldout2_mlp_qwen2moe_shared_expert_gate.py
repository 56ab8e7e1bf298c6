"""Qwen2-MoE's shared expert (HF Qwen2MoeSparseMoeBlock): a SwiGLU Qwen2MoeMLP
(down_proj(act_fn(gate_proj(x)) * up_proj(x))) scaled by a sigmoid gate,
F.sigmoid(shared_expert_gate(x)) * shared_expert(x); the routed experts left out. The gate is a
1-output linear (matmul); the sigmoid product is outside the MLP."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {}, 'calls': 1, 'also': ['matmul']}


class Qwen2MoeMLP(nn.Module):
    def __init__(self, hidden_size=32, intermediate_size=64):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Qwen2MoeSharedExpertBlock(nn.Module):
    def __init__(self, hidden_size=32):
        super().__init__()
        self.shared_expert = Qwen2MoeMLP(hidden_size)
        self.shared_expert_gate = torch.nn.Linear(hidden_size, 1, bias=False)

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        shared_expert_output = self.shared_expert(hidden_states)
        shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output
        return shared_expert_output.reshape(batch_size, sequence_length, hidden_dim)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Qwen2MoeSharedExpertBlock()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 8, 32)]
