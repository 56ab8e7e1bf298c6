"""A look-alike of attention: Apple's sigmoid attention (ml-sigmoid-attention's reference path),
torch.sigmoid(q @ kᵀ · scale + b) @ v with the bias b = -log(S). No softmax: no flash_attention and
no softmax target; the two products are batched matmuls."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': None, 'also': ['matmul']}


class SigmoidAttention(nn.Module):
    def forward(self, q, k, v):
        seq = k.shape[-2]
        scale = q.shape[-1] ** -0.5
        bias = -math.log(seq)
        attn = torch.sigmoid(q @ k.transpose(-2, -1) * scale + bias)
        return attn @ v


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = SigmoidAttention()

    def forward(self, q, k, v):
        return self.attn(q, k, v)


def get_inputs():
    return [torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)]
