"""Post-norm residual blocks in an nn.ModuleList loop: each layer computes
`self.norm(x + self.proj(x))` with a Llama-style RMSNorm; the residual add feeding the norm is
one add_rmsnorm call per layer (2 layers, 2 calls)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'add_rmsnorm', 'params': {'eps': 1e-05}, 'calls': 2,
            'also': ['matmul']}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x_fp32 = x.float()
        normed = x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class PostNormLayer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm = RMSNorm(dim)

    def forward(self, x):
        return self.norm(x + self.proj(x))


class Model(nn.Module):
    def __init__(self, dim=512):
        super().__init__()
        self.layers = nn.ModuleList([PostNormLayer(dim), PostNormLayer(dim)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def get_inputs():
    return [torch.randn(2, 128, 512)]
