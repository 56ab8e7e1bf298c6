"""timm's Mlp: fc1, `act_layer()` (nn.GELU passed as a class), drop1 (nn.Dropout(0.)), norm
(nn.Identity), fc2, drop2. The GELU is its own target beside the linears."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'none'}, 'calls': 1,
            'also': ['matmul']}


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU,
                 norm_layer=None, bias=True, drop=0.0):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = norm_layer(hidden_features) if norm_layer is not None else nn.Identity()
        self.fc2 = nn.Linear(hidden_features, out_features, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop1(x)
        x = self.norm(x)
        x = self.fc2(x)
        x = self.drop2(x)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Mlp(192, hidden_features=768, act_layer=nn.GELU, drop=0.1)

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 197, 192)]
