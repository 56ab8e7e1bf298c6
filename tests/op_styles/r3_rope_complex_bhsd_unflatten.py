"""Meta's complex-product RoPE in the [B, H, S, D] layout: `torch.view_as_complex(x.float()
.unflatten(-1, (-1, 2)))` times a [S, D/2] `freqs_cis` that broadcasts without
`reshape_for_broadcast`, `torch.view_as_real(..).flatten(-2)`, `.type_as(x)`."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'complex'}, 'calls': 2}


def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
    freqs = torch.outer(torch.arange(end).float(), freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary(x, freqs_cis):
    x_ = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(x_ * freqs_cis).flatten(-2).type_as(x)


class Model(nn.Module):
    def __init__(self, head_dim=64, max_len=256):
        super().__init__()
        self.register_buffer("freqs_cis", precompute_freqs_cis(head_dim, max_len),
                             persistent=False)

    def forward(self, q, k):
        freqs_cis = self.freqs_cis[: q.shape[2]]
        return apply_rotary(q, freqs_cis), apply_rotary(k, freqs_cis)


def get_inputs():
    return [torch.randn(2, 8, 128, 64), torch.randn(2, 8, 128, 64)]
