"""DiT's final layer: `nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)` then adaLN
`modulate(x, shift, scale) = x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)` with shift and
scale from the conditioning (not weights of the norm)."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'layernorm', 'params': {'eps': 1e-06, 'elementwise_affine': False},
            'calls': 1, 'also': ['matmul']}


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class FinalLayer(nn.Module):
    def __init__(self, hidden_size=512):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size))

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return modulate(self.norm_final(x), shift, scale)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.final_layer = FinalLayer()

    def forward(self, x, c):
        return self.final_layer(x, c)


def get_inputs():
    return [torch.randn(4, 256, 512), torch.randn(4, 512)]
