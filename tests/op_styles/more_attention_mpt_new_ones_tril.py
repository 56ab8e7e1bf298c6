"""MPT's scaled_multihead_dot_product_attention: k already laid out [B, H, D, S], `q.matmul(k) *
softmax_scale`, the causal mask built as `attn_weight.new_ones(s, s, dtype=float16).tril()`,
`.to(bool)`, inverted, masked_fill with finfo.min, softmax, `.matmul(v)`."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'scale': 0.125}, 'calls': 1}


def scaled_multihead_dot_product_attention(query, key, value, n_heads, softmax_scale=None,
                                           is_causal=True):
    b, s, _ = query.shape
    q = query.view(b, s, n_heads, -1).permute(0, 2, 1, 3)
    k = key.view(b, s, n_heads, -1).permute(0, 2, 3, 1)
    v = value.view(b, s, n_heads, -1).permute(0, 2, 1, 3)
    min_val = torch.finfo(q.dtype).min
    if softmax_scale is None:
        softmax_scale = 1 / math.sqrt(q.size(-1))
    attn_weight = q.matmul(k) * softmax_scale
    if is_causal:
        s_q, s_k = attn_weight.size(-2), attn_weight.size(-1)
        causal_mask = attn_weight.new_ones(s_q, s_k, dtype=torch.float16)
        causal_mask = causal_mask.tril()
        causal_mask = causal_mask.to(torch.bool)
        causal_mask = ~causal_mask
        attn_weight = attn_weight.masked_fill(causal_mask.view(1, 1, s_q, s_k), min_val)
    attn_weight = torch.softmax(attn_weight, dim=-1)
    out = attn_weight.matmul(v)
    return out.permute(0, 2, 1, 3).reshape(b, s, -1)


class MultiheadAttention(nn.Module):
    def __init__(self, n_heads=4):
        super().__init__()
        self.n_heads = n_heads

    def forward(self, q, k, v):
        return scaled_multihead_dot_product_attention(q, k, v, self.n_heads)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = MultiheadAttention()

    def forward(self, q, k, v):
        return self.attn(q, k, v)


def get_inputs():
    return [torch.randn(2, 20, 256) for _ in range(3)]
