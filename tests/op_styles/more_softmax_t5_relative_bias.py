"""T5's attention with its relative position bias: scores = q @ kᵀ (no scaling) + position_bias
(a learned per-head [1, H, S, S] table looked up from bucketed relative positions), softmax in
float then type_as, @ v. A flash kernel takes a causal mask, not a per-head learned bias, so this
is no flash_attention: the softmax is a softmax target and the products batched matmuls."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'also': ['matmul']}


class T5Attention(nn.Module):
    def __init__(self, n_heads=4, num_buckets=32, max_distance=128):
        super().__init__()
        self.n_heads = n_heads
        self.relative_attention_num_buckets = num_buckets
        self.relative_attention_max_distance = max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, num_buckets=32, max_distance=128):
        relative_buckets = 0
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact) * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        buckets = self._relative_position_bucket(
            relative_position, self.relative_attention_num_buckets,
            self.relative_attention_max_distance)
        values = self.relative_attention_bias(buckets)
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, query_states, key_states, value_states):
        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        position_bias = self.compute_bias(scores.shape[-2], scores.shape[-1])
        scores += position_bias
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        return torch.matmul(attn_weights, value_states)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.SelfAttention = T5Attention()

    def forward(self, q, k, v):
        return self.SelfAttention(q, k, v)


def get_inputs():
    return [torch.randn(2, 4, 24, 16) for _ in range(3)]
