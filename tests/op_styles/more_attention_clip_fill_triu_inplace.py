"""CLIP's text-encoder attention: `_build_causal_attention_mask` as torch.empty(..).fill_(-inf)
.triu_(1).unsqueeze(1), q_proj output * scale, heads folded into the batch, torch.bmm(q, kᵀ),
view to [B, H, S, S] + the causal mask, view back, softmax, bmm with v."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'scale': 0.125},
            'calls': 1}


def build_causal_attention_mask(bsz, seq_len, dtype):
    mask = torch.empty(bsz, seq_len, seq_len, dtype=dtype)
    mask.fill_(torch.tensor(float("-inf")))
    mask.triu_(1)
    mask = mask.unsqueeze(1)
    return mask


class CLIPAttention(nn.Module):
    def __init__(self, embed_dim=256, num_heads=4):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scale = self.head_dim ** -0.5

    def _shape(self, tensor, seq_len, bsz):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, q, k, v, causal_attention_mask):
        bsz, tgt_len, embed_dim = q.size()
        query_states = q * self.scale
        key_states = self._shape(k, -1, bsz)
        value_states = self._shape(v, -1, bsz)
        proj_shape = (bsz * self.num_heads, -1, self.head_dim)
        query_states = self._shape(query_states, tgt_len, bsz).view(*proj_shape)
        key_states = key_states.view(*proj_shape)
        value_states = value_states.view(*proj_shape)
        src_len = key_states.size(1)
        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))
        attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len) + causal_attention_mask
        attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.bmm(attn_weights, value_states)
        attn_output = attn_output.view(bsz, self.num_heads, tgt_len, self.head_dim).transpose(1, 2)
        return attn_output.reshape(bsz, tgt_len, embed_dim)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = CLIPAttention()

    def forward(self, q, k, v):
        bsz, seq_len, _ = q.shape
        mask = build_causal_attention_mask(bsz, seq_len, q.dtype)
        return self.self_attn(q, k, v, mask)


def get_inputs():
    return [torch.randn(2, 16, 256) for _ in range(3)]
