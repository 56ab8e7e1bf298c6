"""DINOv2's block residual: `x = x + self.ls1(attn_out)` with LayerScale (`x * self.gamma`, a
learned per-channel vector), then `self.norm2(x)` (nn.LayerNorm eps 1e-6) for the MLP. The add of
the residual and the scaled branch feeds a LayerNorm of its shape: one add_layernorm; the
LayerScale multiply is the branch's own elementwise op."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'add_layernorm', 'params': {'eps': 1e-06}, 'calls': 1}


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x.mul_(self.gamma) if self.inplace else x * self.gamma


class Block(nn.Module):
    def __init__(self, dim=384):
        super().__init__()
        self.ls1 = LayerScale(dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x, attn_out):
        x = x + self.ls1(attn_out)
        return x, self.norm2(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x, attn_out):
        return self.block(x, attn_out)


def get_inputs():
    return [torch.randn(2, 257, 384), torch.randn(2, 257, 384)]
