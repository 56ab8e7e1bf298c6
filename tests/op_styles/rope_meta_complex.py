"""Meta llama's apply_rotary_emb: view_as_complex(x.float().reshape(..., -1, 2)) * freqs_cis, view_as_real, flatten(3)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'complex', 'layout': 'BSHD'}, 'calls': 2, 'route': 'no'}

def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("freqs_cis", precompute_freqs_cis(16, 12), persistent=False)

    def forward(self, xq, xk):
        return apply_rotary_emb(xq, xk, self.freqs_cis)


def get_inputs():
    return [torch.randn(2, 12, 4, 16), torch.randn(2, 12, 4, 16)]
