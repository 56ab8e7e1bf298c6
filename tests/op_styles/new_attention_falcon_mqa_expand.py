"""Falcon's multi-query attention: one KV head, key/value .expand(-1, num_heads, -1, -1), causal SDPA."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'kv_heads': 1}, 'calls': 1}

class FalconAttention(nn.Module):
    def __init__(self, num_heads=4):
        super().__init__()
        self.num_heads = num_heads

    def forward(self, query_layer, key_layer, value_layer):
        key_layer = key_layer.expand(-1, self.num_heads, -1, -1)
        value_layer = value_layer.expand(-1, self.num_heads, -1, -1)
        return F.scaled_dot_product_attention(query_layer, key_layer, value_layer,
                                              attn_mask=None, dropout_p=0.0, is_causal=True)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attention = FalconAttention()

    def forward(self, q, k, v):
        return self.self_attention(q, k, v)


def get_inputs():
    return [torch.randn(2, 4, 12, 16), torch.randn(2, 1, 12, 16), torch.randn(2, 1, 12, 16)]
