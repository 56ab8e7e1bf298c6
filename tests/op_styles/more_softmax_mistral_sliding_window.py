"""Mistral's sliding-window causal mask (the eager path of `_prepare_4d_causal_attention_mask` with
sliding_window): a query sees only the last `window` keys, so the mask is causal AND banded. A
causal flash kernel would let each query see every earlier key: this is no flash_attention (its
mask is not the causal one); the softmax is a softmax target, the products batched matmuls."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'also': ['matmul']}


def make_sliding_window_causal_mask(seq_len, sliding_window, dtype):
    mask = torch.full((seq_len, seq_len), fill_value=1)
    mask = torch.tril(mask, diagonal=0)
    mask = torch.triu(mask, diagonal=-sliding_window)
    mask = torch.log(mask).to(dtype)
    return mask[None, None, :, :]


class MistralAttention(nn.Module):
    def __init__(self, head_dim=32, sliding_window=4):
        super().__init__()
        self.head_dim = head_dim
        self.sliding_window = sliding_window

    def forward(self, query_states, key_states, value_states):
        q_len = query_states.shape[-2]
        attention_mask = make_sliding_window_causal_mask(q_len, self.sliding_window,
                                                         query_states.dtype)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        return torch.matmul(attn_weights, value_states)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = MistralAttention()

    def forward(self, q, k, v):
        return self.self_attn(q, k, v)


def get_inputs():
    return [torch.randn(2, 4, 24, 32) for _ in range(3)]
