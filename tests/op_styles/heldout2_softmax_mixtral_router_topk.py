"""Mixtral's router (HF MixtralSparseMoeBlock): router_logits = gate(hidden_states) on [tokens, E],
F.softmax(router_logits, dim=1, dtype=torch.float), torch.topk(.., top_k, dim=-1), the top-k weights
renormalized in place by their sum (routing_weights /= routing_weights.sum(-1, keepdim=True)). The
softmax is a softmax (dim 1 of 2-D is the last dim); the renormalizing sum is a piece of a
normalization no kernel type computes, not a reduce target; the gate is a matmul."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'also': ['matmul']}


class MixtralRouter(nn.Module):
    def __init__(self, hidden_dim=32, num_experts=8, top_k=2):
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(hidden_dim, num_experts, bias=False)

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        return routing_weights, selected_experts


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block_sparse_moe = MixtralRouter()

    def forward(self, x):
        return self.block_sparse_moe(x)


def get_inputs():
    return [torch.randn(2, 8, 32)]
