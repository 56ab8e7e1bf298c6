"""A look-alike of GPT-BigCode's multi-query attention with the heads folded into the rows (q
[B, S·H, D], one key, scores viewed [B, S, H, K]): its [1, S, 1, K] mask is banded (each query
sees itself and the two keys before it), not causal. No flash_attention: the softmax and the
products stay targets of their own."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None, 'also': ['matmul', 'softmax']}


class Model(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4, max_positions=32):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        band = torch.tril(torch.ones(max_positions, max_positions, dtype=torch.bool))
        band = band & torch.triu(torch.ones(max_positions, max_positions, dtype=torch.bool), diagonal=-2)
        self.register_buffer("bias", band, persistent=False)

    def forward(self, query, key, value):
        b, s, _ = query.shape
        k_len = key.shape[1]
        mask = self.bias[None, :s, :k_len].unsqueeze(2)
        q = query.reshape(b, s * self.num_heads, self.head_dim)
        scores = torch.empty(b, s * self.num_heads, k_len, dtype=query.dtype)
        scores = torch.baddbmm(scores, q, key.transpose(-1, -2), beta=0, alpha=self.head_dim ** -0.5)
        scores = scores.view(b, s, self.num_heads, k_len)
        scores = torch.where(mask, scores, torch.full([], torch.finfo(scores.dtype).min))
        probs = torch.softmax(scores, dim=-1)
        return torch.bmm(probs.view(b, s * self.num_heads, k_len), value).view(b, s, -1)


def get_inputs():
    return [torch.randn(2, 8, 64), torch.randn(2, 8, 16), torch.randn(2, 8, 16)]
