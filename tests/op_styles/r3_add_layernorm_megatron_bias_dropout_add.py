"""Megatron-LM's post-attention residual: the projection's bias is added late by a
`@torch.jit.script` `bias_dropout_add_fused_inference(x, bias, residual, prob)`
(`out = F.dropout(x + bias, p=prob, training=False); out = residual + out`), then the
post-attention LayerNorm of that sum."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'add_layernorm', 'params': {'eps': 1e-05}, 'calls': 1}


def bias_dropout_add(x, bias, residual, prob: float, training: bool):
    out = F.dropout(x + bias, p=prob, training=training)
    out = residual + out
    return out


@torch.jit.script
def bias_dropout_add_fused_inference(x: torch.Tensor, bias: torch.Tensor,
                                     residual: torch.Tensor, prob: float) -> torch.Tensor:
    return bias_dropout_add(x, bias, residual, prob, False)


class Layer(nn.Module):
    def __init__(self, hidden=512):
        super().__init__()
        self.dense_bias = nn.Parameter(torch.zeros(hidden))
        self.post_attention_layernorm = nn.LayerNorm(hidden, eps=1e-5)
        self.hidden_dropout = 0.1

    def forward(self, attention_output, residual):
        layernorm_input = bias_dropout_add_fused_inference(
            attention_output, self.dense_bias.expand_as(residual), residual, self.hidden_dropout)
        return self.post_attention_layernorm(layernorm_input)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = Layer()

    def forward(self, attention_output, residual):
        return self.layer(attention_output, residual)


def get_inputs():
    return [torch.randn(2, 64, 512), torch.randn(2, 64, 512)]
