"""GPT-BigCode (StarCoder) multi-query attention, SDPA path: c_attn(x).split((embed_dim,
2 * head_dim), dim=2) into the query and ONE key/value head, key_value.split(head_dim, -1),
key/value unsqueezed to one head and expanded over the query heads, causal SDPA."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'kv_heads': 1},
            'calls': 1, 'also': ['matmul']}


class GPTBigCodeSdpaAttention(nn.Module):
    def __init__(self, embed_dim=256, num_heads=4):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.kv_dim = self.head_dim
        self.c_attn = nn.Linear(embed_dim, embed_dim + 2 * self.kv_dim)

    def forward(self, hidden_states):
        query, key_value = self.c_attn(hidden_states).split(
            (self.embed_dim, 2 * self.kv_dim), dim=2)
        key, value = key_value.split((self.head_dim, self.head_dim), dim=-1)
        batch_size, query_length = query.shape[0], query.shape[1]
        query = query.view(batch_size, query_length, self.num_heads, self.head_dim).transpose(1, 2)
        key = key.unsqueeze(1).expand(-1, self.num_heads, -1, -1)
        value = value.unsqueeze(1).expand(-1, self.num_heads, -1, -1)
        sdpa_result = F.scaled_dot_product_attention(
            query, key, value, attn_mask=None, dropout_p=0.0, is_causal=True)
        return sdpa_result.transpose(1, 2).reshape(batch_size, query_length, self.embed_dim)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = GPTBigCodeSdpaAttention()

    def forward(self, x):
        return self.attn(x)


def get_inputs():
    return [torch.randn(2, 24, 256)]
