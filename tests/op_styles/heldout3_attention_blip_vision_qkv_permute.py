"""BLIP's vision attention (HF BlipAttention): one qkv Linear reshaped [B, S, 3, H, D] and permuted
(2, 0, 3, 1, 4), q, k, v = mixed_qkv[0], [1], [2]; scores = q @ kᵀ, then * self.scale
(head_dim^-½), softmax(-1), dropout (eval), @ v, permute(0, 2, 1, 3), reshape, projection.
Non-causal (an image encoder)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': False, 'scale': 0.25},
            'calls': 1, 'also': ['matmul']}


class BlipAttention(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.dropout = nn.Dropout(0.0)
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.projection = nn.Linear(embed_dim, embed_dim)

    def forward(self, hidden_states):
        bsz, tgt_len, embed_dim = hidden_states.size()
        mixed_qkv = (self.qkv(hidden_states)
                     .reshape(bsz, tgt_len, 3, self.num_heads, embed_dim // self.num_heads)
                     .permute(2, 0, 3, 1, 4))
        query_states, key_states, value_states = mixed_qkv[0], mixed_qkv[1], mixed_qkv[2]
        attention_scores = torch.matmul(query_states, key_states.transpose(-1, -2))
        attention_scores = attention_scores * self.scale
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_states).permute(0, 2, 1, 3)
        new_context_layer_shape = context_layer.size()[:-2] + (self.embed_dim,)
        context_layer = context_layer.reshape(new_context_layer_shape)
        return self.projection(context_layer)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = BlipAttention()

    def forward(self, hidden_states):
        return self.self_attn(hidden_states)


def get_inputs():
    return [torch.randn(2, 17, 64)]
