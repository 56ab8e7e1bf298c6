"""`torch.nn.functional.linear(x, self.w.t())` with the weight stored [in, out] (a JAX/Flax-ported
layout), transposed at the call."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'matmul', 'params': {}, 'calls': 1}


class DenseGeneral(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.w = nn.Parameter(torch.randn(in_features, out_features) * 0.02)

    def forward(self, x):
        return torch.nn.functional.linear(x, self.w.t())


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = DenseGeneral(128, 192)

    def forward(self, x):
        return self.dense(x)


def get_inputs():
    return [torch.randn(4, 32, 128)]
