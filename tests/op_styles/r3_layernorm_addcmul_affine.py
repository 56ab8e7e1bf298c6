"""A LayerNorm whose affine step is one `torch.addcmul(self.bias, x_hat, self.weight)` (bias +
x̂ · w), after `x_hat = (x - mu) * torch.rsqrt(var + eps)` with `torch.var_mean(x, -1,
unbiased=False, keepdim=True)`."""

import torch
from torch import nn

# elementwise_affine None: the site must not say the norm has no affine (it has, in the addcmul)
EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05, 'elementwise_affine': None},
            'calls': 1}


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        var, mu = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)
        x_hat = (x - mu) * torch.rsqrt(var + self.eps)
        return torch.addcmul(self.bias, x_hat, self.weight)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LayerNorm(768)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 768)]
