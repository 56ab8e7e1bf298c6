"""OpenCLIP's LayerNormFp32: `F.layer_norm(x.to(torch.float32), self.normalized_shape,
self.weight, self.bias, self.eps)` then `.to(orig_type)` (here `.type_as(x)`)."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1}


class LayerNormFp32(nn.LayerNorm):
    def forward(self, x: torch.Tensor):
        out = F.layer_norm(x.to(torch.float32), self.normalized_shape,
                           self.weight.float(), self.bias.float(), self.eps)
        return out.type_as(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_post = LayerNormFp32(768)

    def forward(self, x):
        return self.ln_post(x)


def get_inputs():
    return [torch.randn(2, 197, 768)]
