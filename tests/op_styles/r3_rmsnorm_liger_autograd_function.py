"""A Liger/Unsloth-style RMSNorm wrapper: a `torch.autograd.Function` whose forward upcasts,
computes `rstd = torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps)`, saves it for the
backward and returns `(X * rstd * W).to(dtype)`; the module calls `.apply(x, self.weight,
self.eps)`."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1}


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, W, eps):
        shape = X.shape
        dtype = X.dtype
        X = X.view(-1, shape[-1]).to(torch.float32)
        rstd = torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps)
        Y = X * rstd * W.to(torch.float32)
        ctx.eps = eps
        ctx.save_for_backward(X, W, rstd)
        return Y.to(dtype).view(*shape)

    @staticmethod
    def backward(ctx, dY):
        raise NotImplementedError


class LigerRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        return RMSNormFunction.apply(hidden_states, self.weight, self.variance_epsilon)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LigerRMSNorm(1024)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 128, 1024)]
