"""InternLM2's MLP (HF remote code, InternLM2MLP): w1 (gate), w3 (up), w2 (down), all bias-free
nn.Linear, act_fn = ACT2FN["silu"]: down = self.w2(self.act_fn(self.w1(x)) * self.w3(x))."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {}, 'calls': 1}


class InternLM2MLP(nn.Module):
    def __init__(self, hidden_size=64, intermediate_size=128):
        super().__init__()
        self.w1 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.w3 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.w2 = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        down_proj = self.w2(self.act_fn(self.w1(x)) * self.w3(x))
        return down_proj


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.feed_forward = InternLM2MLP()

    def forward(self, x):
        return self.feed_forward(x)


def get_inputs():
    return [torch.randn(2, 8, 64)]
