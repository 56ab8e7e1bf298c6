"""Llama 4's attention on a NoPE layer with attn_temperature_tuning (HF Llama4TextAttention): the
queries [B, S, H, D] multiplied by a per-position scale, log(floor((pos + 1) / floor_scale) + 1)
* attn_scale + 1, viewed (1, S, 1, 1) and expanded, then transposed to heads; eager attention
with repeat_kv (2 KV heads for 4), matmul(q, kᵀ) * head_dim^-½, the additive causal mask,
softmax in float32, matmul with v. The per-position scale is part of q: the attention's own
scale is head_dim^-½."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'scale': 0.25, 'kv_heads': 2},
            'calls': 1, 'also': ['matmul']}


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
    attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights.float(), dim=-1).to(query.dtype)
    attn_output = torch.matmul(attn_weights, value_states)
    return attn_output.transpose(1, 2).contiguous()


class Llama4TextAttention(nn.Module):
    def __init__(self, hidden_size=64, num_heads=4, num_key_value_heads=2, floor_scale=4, attn_scale=0.1):
        super().__init__()
        self.head_dim = hidden_size // num_heads
        self.num_key_value_groups = num_heads // num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.floor_scale = floor_scale
        self.attn_scale = attn_scale
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask, cache_position):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape)
        key_states = self.k_proj(hidden_states).view(*input_shape, -1, self.head_dim)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        attn_scales = (torch.log(torch.floor((cache_position.float() + 1.0) / self.floor_scale) + 1.0)
                       * self.attn_scale + 1.0)
        attn_scales = attn_scales.view((1, input_shape[-1], 1, 1)).expand((*input_shape, 1, 1))
        query_states = (query_states * attn_scales).to(query_states.dtype)
        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        attn_output = eager_attention_forward(self, query_states, key_states, value_states,
                                              attention_mask, self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Llama4TextAttention()

    def forward(self, hidden_states):
        s = hidden_states.shape[1]
        cache_position = torch.arange(s)
        mask = torch.full((s, s), torch.finfo(hidden_states.dtype).min).triu(1)[None, None]
        return self.self_attn(hidden_states, mask, cache_position)


def get_inputs():
    return [torch.randn(2, 8, 64)]
