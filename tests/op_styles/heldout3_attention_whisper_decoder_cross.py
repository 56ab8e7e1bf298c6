"""Whisper's decoder cross-attention (HF WhisperAttention, is_cross_attention, eager): queries
from the decoder's hidden states (8 tokens), keys and values from the encoder's output (12
frames), q_proj(x) * scaling (D^-½), heads folded into the batch (_shape, view(B·H, -1, D)),
bmm(q, kᵀ), softmax(-1), bmm with v, out_proj. No mask: a cross-attention is never causal; its
key length differs from its query length."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': False, 'scale': 0.25, 'kv_len': 12},
            'calls': 1, 'route': 'no', 'also': ['matmul']}
# kv_len and the route were added after the held-out run (phase 2): the chain notes a key length
# other than the query's, which the [B, H, S, D] kernels do not take.


class WhisperAttention(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=True)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=True)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=True)

    def _shape(self, tensor, seq_len, bsz):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states, key_value_states):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states) * self.scaling
        key_states = self._shape(self.k_proj(key_value_states), -1, bsz)
        value_states = self._shape(self.v_proj(key_value_states), -1, bsz)
        proj_shape = (bsz * self.num_heads, -1, self.head_dim)
        query_states = self._shape(query_states, tgt_len, bsz).view(*proj_shape)
        key_states = key_states.reshape(*proj_shape)
        value_states = value_states.reshape(*proj_shape)
        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.bmm(attn_weights, value_states)
        attn_output = attn_output.view(bsz, self.num_heads, tgt_len, self.head_dim)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, tgt_len, self.embed_dim)
        return self.out_proj(attn_output)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder_attn = WhisperAttention()

    def forward(self, hidden_states, encoder_hidden_states):
        return self.encoder_attn(hidden_states, encoder_hidden_states)


def get_inputs():
    return [torch.randn(2, 8, 64), torch.randn(2, 12, 64)]
