"""Two layers run in a loop over an nn.ModuleList, each an HF-style RMSNorm then a linear: the
norm is one target of 2 calls."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rmsnorm', 'params': {'eps': 1e-06}, 'calls': 2, 'also': ['matmul']}


class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Layer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        return self.proj(self.norm(x))


class Model(nn.Module):
    def __init__(self, dim=512, n_layers=2):
        super().__init__()
        self.layers = nn.ModuleList([Layer(dim) for _ in range(n_layers)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def get_inputs():
    return [torch.randn(2, 128, 512)]
