"""GPT-NeoX-style rotate-half with `x1, x2 = x.chunk(2, dim=-1)`, `torch.cat((-x2, x1), dim=-1)`,
its cos/sin computed in forward (`emb = torch.cat((freqs, freqs), dim=-1)`, `emb.cos()[None,
None]`) from an `inv_freq` buffer, applied to q and k in the [B, H, S, D] layout."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'rotate_half'}, 'calls': 2}


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim=64, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q, k):
        seq_len = q.shape[-2]
        t = torch.arange(seq_len, device=q.device).type_as(self.inv_freq)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None, :, :], emb.sin()[None, None, :, :]
        return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary_emb = RotaryEmbedding()

    def forward(self, q, k):
        return self.rotary_emb(q, k)


def get_inputs():
    return [torch.randn(2, 8, 128, 64), torch.randn(2, 8, 128, 64)]
