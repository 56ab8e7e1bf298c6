"""An Unsloth-style SwiGLU: the gate and up projections are plain linears, and the product is a
`torch.autograd.Function` (`swiglu_fg_kernel`) whose forward computes
`F.silu(e.float()).to(g.dtype) * g`; the down projection follows."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {}, 'calls': 1}


class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, e, g):
        ctx.save_for_backward(e, g)
        return F.silu(e.float()).to(g.dtype) * g

    @staticmethod
    def backward(ctx, dh):
        raise NotImplementedError


class LlamaMLP(nn.Module):
    def __init__(self, hidden_size=512, intermediate_size=1376):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x):
        e = self.gate_proj(x)
        g = self.up_proj(x)
        h = SwiGLUFunction.apply(e, g)
        return self.down_proj(h)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = LlamaMLP()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 128, 512)]
