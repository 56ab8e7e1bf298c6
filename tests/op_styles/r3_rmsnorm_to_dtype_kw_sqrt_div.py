"""An RMSNorm upcast with `.to(dtype=torch.float32)`, the mean square as
`torch.mean(h ** 2, dim=-1, keepdim=True)` and the division by `torch.sqrt(variance + eps)`,
the weight multiplied first: `(self.weight * h).to(input_dtype)`."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 1}


class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        h = hidden_states.to(dtype=torch.float32)
        variance = torch.mean(h ** 2, dim=-1, keepdim=True)
        h = h / torch.sqrt(variance + self.eps)
        return (self.weight * h).to(input_dtype)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(2048)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(2, 64, 2048)]
