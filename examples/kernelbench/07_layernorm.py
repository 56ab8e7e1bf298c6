"""LayerNorm over the hidden dim: nn.LayerNorm(4096) on x [16384 tokens, 4096].

Op family: layernorm (weight and bias, eps 1e-5) at M=16384, N=4096: 128 MB in fp16, bandwidth
bound. Verify routes the nn.LayerNorm module to the kernel.
"""

import torch
from torch import nn

TOKENS, HIDDEN = 16384, 4096


class Model(nn.Module):
    def __init__(self, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs() -> list:
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs() -> list:
    return [HIDDEN]
