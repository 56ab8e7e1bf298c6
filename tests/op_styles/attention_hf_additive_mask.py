"""HF eager attention: matmul(q, k.transpose(2, 3)) * scaling + a causal mask of finfo.min built in forward, float softmax cast back."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1}

def eager_attention_forward(query, key, value, attention_mask, scaling):
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    causal_mask = attention_mask[:, :, :, : key.shape[-2]]
    attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(attn_weights, value)


class Attention(nn.Module):
    def forward(self, q, k, v):
        seq = q.shape[-2]
        mask = torch.full((seq, seq), torch.finfo(q.dtype).min, dtype=q.dtype).triu(1)[None, None]
        return eager_attention_forward(q, k, v, mask, q.shape[-1] ** -0.5)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Attention()

    def forward(self, q, k, v):
        return self.self_attn(q, k, v)


def get_inputs():
    return [torch.randn(2, 4, 16, 8) for _ in range(3)]
