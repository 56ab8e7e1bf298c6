"""YOSO's expectation attention (HF YosoSelfAttention with use_expectation, the YosoCumulation
math): q and k L2-normalized (F.normalize(p=2, dim=-1)), expectation = (1 - acos(q @ kᵀ) / π)
** hash_code_len, times the query and key masks, then @ v. No softmax, no exp: no attention
kernel, no softmax; an L2 normalize is no RMSNorm; the products are matmuls."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': None, 'also': ['matmul']}


class YosoSelfAttention(nn.Module):
    def __init__(self, hidden_size=64, num_heads=4, hash_code_len=9):
        super().__init__()
        self.num_attention_heads = num_heads
        self.attention_head_size = hidden_size // num_heads
        self.hash_code_len = hash_code_len
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)

    def transpose_for_scores(self, layer):
        new_layer_shape = layer.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return layer.view(*new_layer_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        batch_size, num_heads, seq_len, head_dim = query_layer.size()
        query_layer = query_layer.reshape(batch_size * num_heads, seq_len, head_dim)
        key_layer = key_layer.reshape(batch_size * num_heads, seq_len, head_dim)
        value_layer = value_layer.reshape(batch_size * num_heads, seq_len, head_dim)
        attention_mask = attention_mask.repeat_interleave(num_heads, dim=0).float()
        key_layer = nn.functional.normalize(key_layer, p=2, dim=-1)
        query_layer = nn.functional.normalize(query_layer, p=2, dim=-1)
        expectation = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        expectation = (1 - torch.acos(expectation.clamp(-1.0, 1.0)) / math.pi) ** self.hash_code_len
        expectation = expectation * attention_mask[:, :, None] * attention_mask[:, None, :]
        context_layer = torch.matmul(expectation, value_layer)
        context_layer = context_layer.reshape(batch_size, num_heads, seq_len, head_dim)
        return context_layer.permute(0, 2, 1, 3).reshape(batch_size, seq_len, -1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self = YosoSelfAttention()

    def forward(self, hidden_states):
        attention_mask = torch.ones(hidden_states.shape[:2])
        return self.self(hidden_states, attention_mask)


def get_inputs():
    return [torch.randn(2, 16, 64)]
