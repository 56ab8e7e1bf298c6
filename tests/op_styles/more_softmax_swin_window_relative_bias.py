"""Swin's WindowAttention: q * scale @ kᵀ over each window, + the relative position bias gathered
from a learned table by a constant index, nn.Softmax(dim=-1), @ v.
A learned bias is no causal mask: no flash_attention; the softmax is a softmax target and the
products batched matmuls."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'also': ['matmul']}


class WindowAttention(nn.Module):
    def __init__(self, dim=96, window_size=(7, 7), num_heads=3):
        super().__init__()
        self.window_size = window_size
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            torch.randn((2 * window_size[0] - 1) * (2 * window_size[1] - 1), num_heads) * 0.02)
        coords_h = torch.arange(window_size[0])
        coords_w = torch.arange(window_size[1])
        coords = torch.stack(torch.meshgrid([coords_h, coords_w], indexing="ij"))
        coords_flatten = torch.flatten(coords, 1)
        relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
        relative_coords = relative_coords.permute(1, 2, 0).contiguous()
        relative_coords[:, :, 0] += window_size[0] - 1
        relative_coords[:, :, 1] += window_size[1] - 1
        relative_coords[:, :, 0] *= 2 * window_size[1] - 1
        self.register_buffer("relative_position_index", relative_coords.sum(-1))
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, q, k, v):
        B_, _, N, _ = q.shape
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        relative_position_bias = self.relative_position_bias_table[
            self.relative_position_index.view(-1)].view(
            self.window_size[0] * self.window_size[1], self.window_size[0] * self.window_size[1], -1)
        relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous()
        attn = attn + relative_position_bias.unsqueeze(0)
        attn = self.softmax(attn)
        return attn @ v


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = WindowAttention()

    def forward(self, q, k, v):
        return self.attn(q, k, v)


def get_inputs():
    return [torch.randn(16, 3, 49, 32) for _ in range(3)]
