"""BERT's eager self-attention: scores / sqrt(d) + the extended padding mask (an input, [B, 1, 1, S]),
nn.Softmax(dim=-1), dropout, @ v. A padding mask is no causal mask, so it is no flash_attention:
the softmax is a softmax target and the products batched matmuls."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'also': ['matmul']}

class BertSelfAttention(nn.Module):
    def __init__(self, head_size=16):
        super().__init__()
        self.attention_head_size = head_size
        self.dropout = nn.Dropout(0.1)

    def forward(self, query_layer, key_layer, value_layer, attention_mask):
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        return torch.matmul(attention_probs, value_layer)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self = BertSelfAttention()

    def forward(self, q, k, v, padding):
        extended = (1.0 - padding[:, None, None, :]) * torch.finfo(q.dtype).min
        return self.self(q, k, v, extended)


def get_inputs():
    padding = torch.ones(2, 12)
    padding[1, 9:] = 0
    return [torch.randn(2, 4, 12, 16), torch.randn(2, 4, 12, 16), torch.randn(2, 4, 12, 16), padding]
