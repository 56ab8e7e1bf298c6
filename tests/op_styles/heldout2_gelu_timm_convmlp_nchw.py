"""timm's ConvMlp (used by e.g. ConvNeXt-style and PoolFormer-style stages): 1x1 Conv2d fc1,
norm (Identity), act_layer=nn.GELU, Dropout(0.), 1x1 Conv2d fc2 on an NCHW map. The exact GELU on a
4-D tensor is one gelu call; the convolutions are no kernel type."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'gelu', 'params': {'approximate': 'none'}, 'calls': 1}


class ConvMlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.ReLU,
                 norm_layer=None, bias=True, drop=0.0):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Conv2d(in_features, hidden_features, kernel_size=1, bias=bias)
        self.norm = norm_layer(hidden_features) if norm_layer else nn.Identity()
        self.act = act_layer()
        self.drop = nn.Dropout(drop)
        self.fc2 = nn.Conv2d(hidden_features, out_features, kernel_size=1, bias=bias)

    def forward(self, x):
        x = self.fc1(x)
        x = self.norm(x)
        x = self.act(x)
        x = self.drop(x)
        x = self.fc2(x)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = ConvMlp(16, 32, act_layer=nn.GELU)

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(2, 16, 8, 8)]
