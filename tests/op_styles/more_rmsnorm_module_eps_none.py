"""torch.nn.RMSNorm with eps left at None: torch uses torch.finfo(x.dtype).eps (fp32: 2^-23)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1.1920928955078125e-07}, 'calls': 1}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(256)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 32, 256)]
