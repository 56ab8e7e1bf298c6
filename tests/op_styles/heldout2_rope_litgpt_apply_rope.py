"""lit-gpt's RoPE: build_rope_cache (idx_theta = torch.outer(seq_idx, theta).repeat(1, 2); cos, sin)
held as non-persistent buffers and sliced [:T]; apply_rope (x1, x2 = the two halves,
torch.cat((-x2, x1), -1), x * cos + rotated * sin, .to(dtype=x.dtype)) on q[..., :rope_n_elem] and
k[..., :rope_n_elem] concatenated with the (here empty) rest; [B, H, T, hs]."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'rotate_half'}, 'calls': 2}


def build_rope_cache(seq_len, n_elem, device=None, base=10000, condense_ratio=1):
    theta = 1.0 / (base ** (torch.arange(0, n_elem, 2, device=device).float() / n_elem))
    seq_idx = torch.arange(seq_len, device=device) / condense_ratio
    idx_theta = torch.outer(seq_idx, theta).repeat(1, 2)
    return torch.cos(idx_theta), torch.sin(idx_theta)


def apply_rope(x, cos, sin):
    head_size = x.size(-1)
    x1 = x[..., : head_size // 2]
    x2 = x[..., head_size // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)
    roped = (x * cos) + (rotated * sin)
    return roped.to(dtype=x.dtype)


class Model(nn.Module):
    def __init__(self, block_size=32, rope_n_elem=16):
        super().__init__()
        self.rope_n_elem = rope_n_elem
        cos, sin = build_rope_cache(block_size, rope_n_elem)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, q, k):
        T = q.size(2)
        cos, sin = self.cos[:T], self.sin[:T]
        q_roped = apply_rope(q[..., : self.rope_n_elem], cos, sin)
        k_roped = apply_rope(k[..., : self.rope_n_elem], cos, sin)
        q = torch.cat((q_roped, q[..., self.rope_n_elem :]), dim=-1)
        k = torch.cat((k_roped, k[..., self.rope_n_elem :]), dim=-1)
        return q, k


def get_inputs():
    return [torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16)]
