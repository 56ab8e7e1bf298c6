"""OpenFold's LayerNorm (openfold/model/primitives.py): its own weight/bias Parameters (c_in,), eps
1e-5; forward casts the parameters to x's dtype when x is bfloat16 and runs nn.functional.
layer_norm(x, self.c_in, weight, bias, self.eps) with autocast off, else calls it directly. Over
the last dim of a pair representation [B, N, N, C]."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1}


class LayerNorm(nn.Module):
    def __init__(self, c_in, eps=1e-5):
        super().__init__()
        self.c_in = (c_in,)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(c_in))
        self.bias = nn.Parameter(torch.zeros(c_in))

    def forward(self, x):
        d = x.dtype
        if d is torch.bfloat16:
            with torch.autocast(device_type=x.device.type, enabled=False):
                out = nn.functional.layer_norm(x, self.c_in, self.weight.to(dtype=d), self.bias.to(dtype=d), self.eps)
        else:
            out = nn.functional.layer_norm(x, self.c_in, self.weight, self.bias, self.eps)
        return out


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_norm_z = LayerNorm(32)

    def forward(self, z):
        return self.layer_norm_z(z)


def get_inputs():
    return [torch.randn(1, 16, 16, 32)]
