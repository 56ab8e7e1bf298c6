"""Meta llama's Attention core: repeat_kv on [B, S, KV, D] (x[:, :, :, None, :].expand.reshape), transpose
to [B, H, S, D], scores / sqrt(d) + mask (torch.full(-inf).triu(1) built by the caller), softmax(scores.float()).type_as(xq)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'kv_heads': 2}, 'calls': 1}

def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim))


class Attention(nn.Module):
    def __init__(self, n_heads=4, n_kv_heads=2, head_dim=8):
        super().__init__()
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = head_dim

    def forward(self, xq, xk, xv, mask):
        keys = repeat_kv(xk, self.n_rep)
        values = repeat_kv(xv, self.n_rep)
        xq = xq.transpose(1, 2)
        keys = keys.transpose(1, 2)
        values = values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)
        return output.transpose(1, 2).contiguous()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()

    def forward(self, xq, xk, xv):
        seqlen = xq.shape[1]
        mask = torch.full((seqlen, seqlen), float("-inf"), device=xq.device)
        mask = torch.triu(mask, diagonal=1)
        return self.attention(xq, xk, xv, mask)


def get_inputs():
    return [torch.randn(2, 12, 4, 8), torch.randn(2, 12, 2, 8), torch.randn(2, 12, 2, 8)]
