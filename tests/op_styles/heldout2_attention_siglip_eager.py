"""HF SigLIP's eager_attention_forward: q/k/v projections viewed (B, S, -1, D).transpose(1, 2),
torch.matmul(query, key.transpose(-1, -2)) * scaling, softmax(dim=-1, dtype=float32).to(query.dtype),
functional dropout (eval), torch.matmul(attn_weights, value); a vision encoder: no mask."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': False, 'scale': 0.25}, 'calls': 1,
            'also': ['matmul']}


class SiglipAttention(nn.Module):
    def __init__(self, embed_dim=32, num_heads=2):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scale = self.head_dim**-0.5
        self.dropout = 0.0
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, hidden_states):
        batch_size, seq_length, embed_dim = hidden_states.shape
        queries = self.q_proj(hidden_states)
        keys = self.k_proj(hidden_states)
        values = self.v_proj(hidden_states)
        queries = queries.view(batch_size, seq_length, -1, self.head_dim).transpose(1, 2)
        keys = keys.view(batch_size, seq_length, -1, self.head_dim).transpose(1, 2)
        values = values.view(batch_size, seq_length, -1, self.head_dim).transpose(1, 2)

        attn_weights = torch.matmul(queries, keys.transpose(-1, -2)) * self.scale
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(queries.dtype)
        attn_weights = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, values)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(batch_size, seq_length, embed_dim).contiguous()
        return self.out_proj(attn_output)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = SiglipAttention()

    def forward(self, x):
        return self.self_attn(x)


def get_inputs():
    return [torch.randn(2, 8, 32)]
