"""A look-alike of the tanh GELU: `0.5 * x * (1 + torch.tanh(x))` has neither √(2/π) nor
0.044715·x³ — it is x·sigmoid(2x), not GELU: no target."""

import torch
from torch import nn

EXPECTED = {'kernel_type': None}


class Model(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(x))


def get_inputs():
    return [torch.randn(4, 128, 1024)]
