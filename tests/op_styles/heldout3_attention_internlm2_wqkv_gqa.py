"""InternLM2's attention (HF remote code, InternLM2Attention eager): one fused `wqkv` projection
rearranged "b q (h gs d) -> b q h gs d" with gs = heads per KV group + 2 (the group's queries,
then its key, then its value), the queries flattened back to heads, repeat_kv on k and v (GQA,
2 KV heads for 4 query heads), q @ kᵀ / sqrt(D), the additive causal mask (a [S, S] table of
finfo.min above the diagonal), softmax in float32 cast back, @ v, and `wo`."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'kv_heads': 2},
            'calls': 1, 'also': ['matmul']}


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class InternLM2Attention(nn.Module):
    def __init__(self, hidden_size=64, num_heads=4, num_key_value_heads=2):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.num_key_value_heads = num_key_value_heads
        self.num_key_value_groups = num_heads // num_key_value_heads
        self.wqkv = nn.Linear(hidden_size, (num_heads + 2 * num_key_value_heads) * self.head_dim, bias=False)
        self.wo = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask):
        bsz, q_len, _ = hidden_states.size()
        qkv_states = self.wqkv(hidden_states)
        gs = 2 + self.num_key_value_groups
        qkv_states = qkv_states.view(bsz, q_len, self.num_key_value_heads, gs, self.head_dim)
        query_states = qkv_states[..., : self.num_key_value_groups, :]
        query_states = query_states.reshape(bsz, q_len, self.num_heads, self.head_dim)
        key_states = qkv_states[..., -2, :]
        value_states = qkv_states[..., -1, :]
        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        value_states = value_states.transpose(1, 2)
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous().reshape(bsz, q_len, -1)
        return self.wo(attn_output)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = InternLM2Attention()

    def forward(self, hidden_states):
        q_len = hidden_states.shape[1]
        mask = torch.full((q_len, q_len), torch.finfo(hidden_states.dtype).min, device=hidden_states.device)
        mask = torch.triu(mask, diagonal=1)[None, None, :, :]
        return self.attention(hidden_states, mask)


def get_inputs():
    return [torch.randn(2, 8, 64)]
