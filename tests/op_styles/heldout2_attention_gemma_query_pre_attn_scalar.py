"""Gemma (HF GemmaAttention, eager) with config.query_pre_attn_scalar: scaling =
query_pre_attn_scalar ** -0.5 (64 here, head_dim 16: 0.125, not 1/sqrt(D)), repeat_kv for GQA
(4 heads over 2 KV heads), scores + a causal mask of finfo.min (full(..).triu(1)), softmax in float32
cast back, @ v."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'scale': 0.125, 'kv_heads': 2},
            'calls': 1}


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
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output


class GemmaAttention(nn.Module):
    def __init__(self, query_pre_attn_scalar=64, heads=4, kv_heads=2):
        super().__init__()
        self.num_key_value_groups = heads // kv_heads
        self.scaling = query_pre_attn_scalar**-0.5

    def forward(self, q, k, v, attention_mask):
        return eager_attention_forward(self, q, k, v, attention_mask, self.scaling)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = GemmaAttention()

    def forward(self, q, k, v):
        seq = q.shape[-2]
        min_dtype = torch.finfo(q.dtype).min
        causal_mask = torch.full((seq, seq), fill_value=min_dtype, dtype=q.dtype, device=q.device)
        causal_mask = torch.triu(causal_mask, diagonal=1)[None, None, :, :]
        return self.self_attn(q, k, v, causal_mask)


def get_inputs():
    return [torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)]
