"""An RMSNorm whose math is a module-level `@torch.jit.script` function (as in older
Megatron/Apex fallbacks): `rms_norm(x, weight, eps: float)` computing in float32 with
`torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)` and casting back with `.to(dtype)`."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-05}, 'calls': 1}


@torch.jit.script
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (x * weight.float()).to(dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(1024)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 1024)]
