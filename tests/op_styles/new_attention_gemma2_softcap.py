"""Gemma 2's eager attention with attention-logit soft-capping: tanh(scores / 50) * 50 before the causal
mask and softmax. No flash kernel here caps logits, so it is no flash_attention: the softmax is a
softmax target and the products batched matmuls."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'also': ['matmul']}

class Gemma2Attention(nn.Module):
    def __init__(self, head_dim=16, softcap=50.0, max_positions=32):
        super().__init__()
        self.scaling = head_dim ** -0.5
        self.attn_logit_softcapping = softcap
        self.register_buffer("causal_mask", torch.full((max_positions, max_positions),
                                                       float("-inf")).triu(1), persistent=False)

    def forward(self, query, key, value):
        t = query.shape[-2]
        attn_weights = torch.matmul(query, key.transpose(2, 3)) * self.scaling
        attn_weights = attn_weights / self.attn_logit_softcapping
        attn_weights = torch.tanh(attn_weights)
        attn_weights = attn_weights * self.attn_logit_softcapping
        attn_weights = attn_weights + self.causal_mask[:t, :t]
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
        return torch.matmul(attn_weights, value)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Gemma2Attention()

    def forward(self, q, k, v):
        return self.self_attn(q, k, v)


def get_inputs():
    return [torch.randn(2, 4, 12, 16) for _ in range(3)]
