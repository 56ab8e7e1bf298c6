"""Megatron-LM's erf GELU (`openai_gelu` off, `onnx_safe`): a `@torch.jit.script` helper written
`x * 0.5 * (torch.erf(x / 1.41421).to(dtype=x.dtype) + torch.ones_like(x).to(dtype=x.dtype))`:
the 1 is a ones_like tensor, not a number, and √2 is rounded to 1.41421."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'none'}, 'calls': 1}


@torch.jit.script
def erf_gelu(x):
    return x * 0.5 * (torch.erf(x / 1.41421).to(dtype=x.dtype)
                      + torch.ones_like(x).to(dtype=x.dtype))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.activation_func = erf_gelu

    def forward(self, x):
        return self.activation_func(x)


def get_inputs():
    return [torch.randn(4, 128, 1024)]
