"""Segment Anything's image-encoder Attention (use_rel_pos=False): qkv(x) on a [B, H, W, C] map,
reshape(B, H*W, 3, heads, -1).permute(2, 0, 3, 1, 4).reshape(3, B*heads, H*W, -1).unbind(0),
(q * scale) @ k.transpose(-2, -1), softmax(-1), @ v on 3-D [B*heads, N, D] tensors; no mask."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': False, 'scale': 0.25}, 'calls': 1,
            'also': ['matmul']}


class Attention(nn.Module):
    def __init__(self, dim=32, num_heads=2, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, H, W, _ = x.shape
        qkv = self.qkv(x).reshape(B, H * W, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.reshape(3, B * self.num_heads, H * W, -1).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).view(B, self.num_heads, H, W, -1).permute(0, 2, 3, 1, 4).reshape(B, H, W, -1)
        x = self.proj(x)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, x):
        return self.attn(x)


def get_inputs():
    return [torch.randn(2, 4, 4, 32)]
