"""StableLM's qk_layernorm (HF StableLmLayerNormPerHead): one bias-free nn.LayerNorm(head_dim) per head,
the [B, H, S, D] states split per head with torch.split(x, 1, dim=1) and concatenated back:
one LayerNorm call per head (2 heads here)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 2}


class StableLmLayerNormPerHead(nn.Module):
    def __init__(self, dim, num_heads, eps=1e-5, bias=False):
        super().__init__()
        self.dim = dim
        self.num_heads = num_heads
        self.norms = nn.ModuleList([nn.LayerNorm(dim, eps=eps, bias=bias) for _ in range(self.num_heads)])

    def forward(self, hidden_states):
        # [batch_size, num_heads, seq_len, head_dim] -> [batch_size, 1, seq_len, head_dim] * num_heads
        states_per_heads = torch.split(hidden_states, 1, dim=1)
        return torch.cat([norm(hidden_states) for norm, hidden_states in zip(self.norms, states_per_heads)], dim=1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_layernorm = StableLmLayerNormPerHead(16, 2)

    def forward(self, q):
        return self.q_layernorm(q)


def get_inputs():
    return [torch.randn(2, 2, 8, 16)]
