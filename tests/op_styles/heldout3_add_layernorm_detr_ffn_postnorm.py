"""DETR's encoder layer FFN sublayer, post-norm (facebookresearch/detr TransformerEncoderLayer.
forward_post, normalize_before False): src2 = linear2(dropout(relu(linear1(src)))); src = src +
dropout2(src2); src = norm2(src), on a [S, B, C] sequence; nn.LayerNorm(d_model), eps 1e-5.
The norm reads the residual sum: one add_layernorm call."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'add_layernorm', 'params': {'eps': 1e-05}, 'calls': 1, 'also': ['matmul']}


class TransformerEncoderLayerFFN(nn.Module):
    def __init__(self, d_model=32, dim_feedforward=64, dropout=0.1):
        super().__init__()
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = F.relu

    def forward(self, src):
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src))))
        src = src + self.dropout2(src2)
        src = self.norm2(src)
        return src


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = TransformerEncoderLayerFFN()

    def forward(self, src):
        return self.layer(src)


def get_inputs():
    return [torch.randn(16, 2, 32)]
