"""IBM Granite's eager attention (HF GraniteAttention): the scores' scale is the config's
attention_multiplier (0.03125 here, not 1/sqrt(D)): matmul(q, kᵀ) * scaling, plus the causal
mask sliced to the key length (HF's 4-D mask of finfo.min above the diagonal), softmax in float32
.to(q.dtype), dropout (eval), matmul with v, transpose back, o_proj."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'scale': 0.03125},
            'calls': 1, 'also': ['matmul']}


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    return attn_output.transpose(1, 2).contiguous()


class GraniteAttention(nn.Module):
    def __init__(self, hidden_size=64, num_heads=4, attention_multiplier=0.03125):
        super().__init__()
        self.head_dim = hidden_size // num_heads
        self.scaling = attention_multiplier
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        attn_output = eager_attention_forward(self, query_states, key_states, value_states,
                                              attention_mask, self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = GraniteAttention()

    def forward(self, hidden_states):
        b, s, _ = hidden_states.shape
        min_dtype = torch.finfo(hidden_states.dtype).min
        causal_mask = torch.full((s, s), fill_value=min_dtype, dtype=hidden_states.dtype)
        causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask = causal_mask[None, None, :, :].expand(b, 1, -1, -1)
        return self.self_attn(hidden_states, causal_mask)


def get_inputs():
    return [torch.randn(2, 8, 64)]
