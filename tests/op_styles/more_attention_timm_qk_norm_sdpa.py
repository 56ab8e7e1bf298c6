"""timm's Attention (fused_attn, qk_norm=True): qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4),
`q, k, v = qkv.unbind(0)`, q_norm/k_norm LayerNorms over the head dim, F.scaled_dot_product_attention
with dropout_p 0 (not causal), transpose/reshape, proj. The two head-dim LayerNorms are targets of
their own, the linears matmuls."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': False}, 'calls': 1,
            'also': ['matmul', 'layernorm']}


class Attention(nn.Module):
    def __init__(self, dim=256, num_heads=4, qkv_bias=True, qk_norm=True, norm_layer=nn.LayerNorm):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        x = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, x):
        return self.attn(x)


def get_inputs():
    return [torch.randn(2, 50, 256)]
