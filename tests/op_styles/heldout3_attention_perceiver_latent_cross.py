"""Perceiver's cross-attention (HF PerceiverSelfAttention with is_cross_attention): the latents
(8 of them, a learned parameter expanded over the batch) layer-normed and projected to queries,
the inputs (24 positions) layer-normed and projected to keys and values; heads split by
transpose_for_scores, scores = matmul(q, kᵀ) / sqrt(qk_channels_per_head), softmax(-1), dropout,
matmul with v. Non-causal, key length differs from query length."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': False, 'scale': 0.25, 'kv_len': 24},
            'calls': 1, 'route': 'no', 'also': ['matmul', 'layernorm']}
# kv_len and the route were added after the held-out run (phase 2): the chain notes a key length
# other than the query's, which the [B, H, S, D] kernels do not take.


class PerceiverSelfAttention(nn.Module):
    def __init__(self, q_dim=64, kv_dim=48, num_heads=4):
        super().__init__()
        self.num_heads = num_heads
        self.qk_channels_per_head = q_dim // num_heads
        self.v_channels_per_head = q_dim // num_heads
        self.layernorm1 = nn.LayerNorm(q_dim)
        self.layernorm2 = nn.LayerNorm(kv_dim)
        self.query = nn.Linear(q_dim, q_dim)
        self.key = nn.Linear(kv_dim, q_dim)
        self.value = nn.Linear(kv_dim, q_dim)
        self.dropout = nn.Dropout(0.0)

    def transpose_for_scores(self, x, channels_per_head):
        new_x_shape = x.size()[:-1] + (self.num_heads, channels_per_head)
        x = x.view(*new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, inputs):
        hidden_states = self.layernorm1(hidden_states)
        inputs = self.layernorm2(inputs)
        queries = self.query(hidden_states)
        keys = self.key(inputs)
        values = self.value(inputs)
        queries = self.transpose_for_scores(queries, self.qk_channels_per_head)
        keys = self.transpose_for_scores(keys, self.qk_channels_per_head)
        values = self.transpose_for_scores(values, self.v_channels_per_head)
        attention_scores = torch.matmul(queries, keys.transpose(-1, -2))
        batch_size, num_heads, seq_len, q_head_dim = queries.shape
        attention_scores = attention_scores / math.sqrt(q_head_dim)
        attention_probs = nn.Softmax(dim=-1)(attention_scores)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, values)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        return context_layer.view(batch_size, seq_len, num_heads * self.v_channels_per_head)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(8, 64))
        self.attention = PerceiverSelfAttention()

    def forward(self, inputs):
        batch_size = inputs.shape[0]
        latents = self.latents.expand(batch_size, -1, -1)
        return self.attention(latents, inputs)


def get_inputs():
    return [torch.randn(2, 24, 48)]
