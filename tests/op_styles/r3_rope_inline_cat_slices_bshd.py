"""RoPE written inline in the attention forward, no helper: `torch.cat((-q[..., h:], q[...,
:h]), dim=-1)` for rotate-half, on [B, S, H, D] q and k with [S, 1, D] cos/sin buffers sliced
to the length."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'rotate_half'}, 'calls': 2}


class Model(nn.Module):
    def __init__(self, head_dim=64, max_len=256):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(max_len).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos()[:, None, :], persistent=False)
        self.register_buffer("sin", emb.sin()[:, None, :], persistent=False)

    def forward(self, q, k):
        T, h = q.shape[1], q.shape[-1] // 2
        cos, sin = self.cos[:T], self.sin[:T]
        q = q * cos + torch.cat((-q[..., h:], q[..., :h]), dim=-1) * sin
        k = k * cos + torch.cat((-k[..., h:], k[..., :h]), dim=-1) * sin
        return q, k


def get_inputs():
    return [torch.randn(2, 128, 8, 64), torch.randn(2, 128, 8, 64)]
