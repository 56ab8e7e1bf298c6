"""`x.norm(dim=-1)`: the L2 norm of each row, √Σx². The reduce kernels sum, average or take the
max; a norm is none of them (its square root and squares are part of it), and it is no RMSNorm
(nothing is normalized by it): no target, and its pieces none either."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None}


class Model(nn.Module):
    def forward(self, x):
        return x.norm(dim=-1)


def get_inputs():
    return [torch.randn(64, 16, 256)]
