"""An interleaved (GPT-J-pair) RoPE in the [B, H, S, D] layout whose tables are computed inside
forward from an `inv_freq` buffer (`torch.outer(torch.arange(T), inv_freq)`,
`.repeat_interleave(2, -1)`), the rotation `torch.stack((-x2, x1), dim=-1).flatten(-2)` done in
float32 and cast back with `.type_as(x)`; applied to q and k."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'interleaved'}, 'calls': 2}


def rotate_every_two(x):
    x1 = x[..., 0::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rope(x, cos, sin):
    x_f = x.float()
    return (x_f * cos + rotate_every_two(x_f) * sin).type_as(x)


class Rotary(nn.Module):
    def __init__(self, head_dim=64, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q, k):
        T = q.shape[-2]
        t = torch.arange(T, device=q.device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)
        cos = freqs.cos().repeat_interleave(2, dim=-1)[None, None]
        sin = freqs.sin().repeat_interleave(2, dim=-1)[None, None]
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary = Rotary()

    def forward(self, q, k):
        return self.rotary(q, k)


def get_inputs():
    return [torch.randn(2, 8, 128, 64), torch.randn(2, 8, 128, 64)]
