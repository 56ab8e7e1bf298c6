"""HF GPT-NeoX _attn: baddbmm(torch.zeros(..), q, kᵀ, beta=1.0, alpha=norm_factor) on [B*H, S, D],
view to [B, H, S, S], torch.where(causal, scores, finfo.min), softmax, matmul with v."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1}

class GPTNeoXAttention(nn.Module):
    def __init__(self, head_size=16, max_positions=32):
        super().__init__()
        self.norm_factor = 1.0 / math.sqrt(head_size)
        self.register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions),
                             dtype=torch.bool)).view(1, 1, max_positions, max_positions),
                             persistent=False)

    def forward(self, query, key, value):
        batch_size, num_attention_heads, query_length, attn_head_size = query.size()
        key_length = key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        query = query.view(batch_size * num_attention_heads, query_length, attn_head_size)
        key = key.view(batch_size * num_attention_heads, key_length, attn_head_size)
        attn_scores = torch.zeros(batch_size * num_attention_heads, query_length, key_length,
                                  dtype=query.dtype, device=key.device)
        attn_scores = torch.baddbmm(attn_scores, query, key.transpose(1, 2), beta=1.0,
                                    alpha=self.norm_factor)
        attn_scores = attn_scores.view(batch_size, num_attention_heads, query_length, key_length)
        mask_value = torch.finfo(attn_scores.dtype).min
        mask_value = torch.tensor(mask_value, dtype=attn_scores.dtype).to(attn_scores.device)
        attn_scores = torch.where(causal_mask, attn_scores, mask_value)
        attn_weights = F.softmax(attn_scores, dim=-1)
        attn_weights = attn_weights.to(value.dtype)
        return torch.matmul(attn_weights, value)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = GPTNeoXAttention()

    def forward(self, q, k, v):
        return self.attention(q, k, v)


def get_inputs():
    return [torch.randn(2, 4, 12, 16) for _ in range(3)]
