"""A look-alike of attention: Swin-V2's scaled cosine attention (timm WindowAttention of
swin_transformer_v2, relative position bias left out): F.normalize(q) @ F.normalize(k)ᵀ times a
learned per-head logit scale (clamp(max=log(100)).exp(), a [H, 1, 1] tensor), nn.Softmax(dim=-1),
@ v. A per-head tensor scale of normalized q and k is no scalar attention scale: no flash_attention;
the softmax is a softmax target, the products batched matmuls; F.normalize is no RMSNorm (no √d)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'also': ['matmul']}


class WindowAttention(nn.Module):
    def __init__(self, dim=32, num_heads=2):
        super().__init__()
        self.num_heads = num_heads
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones((num_heads, 1, 1))))
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        B_, N, C = x.shape
        qkv = self.qkv(x)
        qkv = qkv.reshape(B_, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1))
        logit_scale = torch.clamp(self.logit_scale, max=math.log(1.0 / 0.01)).exp()
        attn = attn * logit_scale
        attn = self.softmax(attn)
        x = (attn @ v).transpose(1, 2).reshape(B_, N, -1)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = WindowAttention()

    def forward(self, x):
        return self.attn(x)


def get_inputs():
    return [torch.randn(4, 16, 32)]
