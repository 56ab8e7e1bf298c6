"""HF's Qwen2MLP with `self.act_fn = ACT2FN[config.hidden_act]`: ACT2FN a ClassInstantier mapping
names to activation classes, so the lookup makes a fresh SiLUActivation (its forward
nn.functional.silu); down_proj(act_fn(gate_proj(x)) * up_proj(x))."""

from collections import OrderedDict

import torch
from torch import nn


class SiLUActivation(nn.Module):
    def forward(self, input):
        return nn.functional.silu(input)


class ClassInstantier(OrderedDict):
    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACT2CLS = {"silu": SiLUActivation, "swish": SiLUActivation, "gelu": nn.GELU}
ACT2FN = ClassInstantier(ACT2CLS)

EXPECTED = {'kernel_type': 'fused_mlp', 'params': {}, 'calls': 1}


class Qwen2MLP(nn.Module):
    def __init__(self, hidden_size=128, intermediate_size=352, hidden_act="silu"):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.act_fn = ACT2FN[hidden_act]

    def forward(self, hidden_state):
        return self.down_proj(self.act_fn(self.gate_proj(hidden_state)) * self.up_proj(hidden_state))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Qwen2MLP()

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 16, 128)]
