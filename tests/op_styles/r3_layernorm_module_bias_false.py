"""`nn.LayerNorm(d, bias=False)` (torch >= 2.1), as in OLMo / recent nanoGPT: a weight, no
bias."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-05}, 'calls': 1, 'route': 'module'}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_f = nn.LayerNorm(768, bias=False)

    def forward(self, x):
        return self.ln_f(x)


def get_inputs():
    return [torch.randn(2, 128, 768)]
