"""torchtitan's Attention core: repeat_kv on [B, S, KV, D], transpose(1, 2) of q, k, v, causal SDPA, transpose back."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'kv_heads': 2}, 'calls': 1}

def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (torch.unsqueeze(x, dim=3).expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim))


class Attention(nn.Module):
    def __init__(self, n_heads=8, n_kv_heads=2):
        super().__init__()
        self.n_rep = n_heads // n_kv_heads

    def forward(self, xq, xk, xv):
        keys = repeat_kv(xk, self.n_rep)
        values = repeat_kv(xv, self.n_rep)
        xq = xq.transpose(1, 2)
        xk = keys.transpose(1, 2)
        xv = values.transpose(1, 2)
        output = F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)
        return output.transpose(1, 2).contiguous()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()

    def forward(self, xq, xk, xv):
        return self.attention(xq, xk, xv)


def get_inputs():
    return [torch.randn(2, 16, 8, 8), torch.randn(2, 16, 2, 8), torch.randn(2, 16, 2, 8)]
