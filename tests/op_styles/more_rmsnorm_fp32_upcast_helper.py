"""An fp32-upcast RMSNorm helper as in OLMo/torchtune: `with torch.autocast(enabled=False)`-free
code that upcasts by hand, `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)` in float32,
the weight applied in float32 before casting back to the input's dtype."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1}


def rms_norm_fp32(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    og_dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return (x * weight.to(torch.float32)).to(og_dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return rms_norm_fp32(x, self.scale, self.eps)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(128)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 16, 128)]
