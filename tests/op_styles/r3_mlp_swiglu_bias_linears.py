"""A SwiGLU whose projections have biases (`nn.Linear(..., bias=True)`, as in some vision and
speech models): `w2(F.silu(w1(x)) * w3(x))`. The gated MLP is the op, but the fused_mlp kernel
takes bias-free weights only (autokernel/ops/fused_mlp.py), so the site notes `bias` and verify
does not splice it."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {'bias': True}, 'calls': 1, 'route': 'no'}


class SwiGLU(nn.Module):
    def __init__(self, dim=512, hidden=1376):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=True)
        self.w2 = nn.Linear(hidden, dim, bias=True)
        self.w3 = nn.Linear(dim, hidden, bias=True)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ffn = SwiGLU()

    def forward(self, x):
        return self.ffn(x)


def get_inputs():
    return [torch.randn(2, 128, 512)]
