"""HF Whisper's eager attention (encoder, no mask): q_proj(x) * scaling, heads folded into the
batch by `_shape(..).view(bsz * heads, -1, head_dim)`, torch.bmm(q, kᵀ), softmax, dropout, bmm
with v. The scale sits on the projected query: softmax((q · d^-½) @ kᵀ) @ v is attention with
scale d^-½; the projections are matmuls of their own."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': False, 'scale': 0.125},
            'calls': 1, 'also': ['matmul']}


class WhisperAttention(nn.Module):
    def __init__(self, embed_dim=256, num_heads=4):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = 0.0
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=True)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=True)

    def _shape(self, tensor, seq_len, bsz):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states) * self.scaling
        key_states = self._shape(self.k_proj(hidden_states), -1, bsz)
        value_states = self._shape(self.v_proj(hidden_states), -1, bsz)
        proj_shape = (bsz * self.num_heads, -1, self.head_dim)
        query_states = self._shape(query_states, tgt_len, bsz).view(*proj_shape)
        key_states = key_states.reshape(*proj_shape)
        value_states = value_states.reshape(*proj_shape)
        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_probs = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)
        attn_output = torch.bmm(attn_probs, value_states)
        attn_output = attn_output.view(bsz, self.num_heads, tgt_len, self.head_dim)
        return attn_output.transpose(1, 2).reshape(bsz, tgt_len, self.embed_dim)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = WhisperAttention()

    def forward(self, x):
        return self.self_attn(x)


def get_inputs():
    return [torch.randn(2, 30, 256)]
