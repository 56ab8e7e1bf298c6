"""Megatron-LM's (legacy) CoreAttention on [S, B, heads, D]: heads folded into the batch,
torch.baddbmm(empty buffer, q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2), beta=0.0,
alpha=1/norm_factor), FusedScaleMaskSoftmax's torch fallback (float upcast, attention_mask_func's
masked_fill_(mask, -10000.0) with the GPT "ltor" mask tril(ones) < 0.5, torch.nn.Softmax(dim=-1)),
torch.bmm(probs, v.transpose(0, 1)), permute back. -10000 after a scores' max of O(1) is an exact
zero after exp in float32: the mask is causal."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'scale': 0.25}, 'calls': 1}


def attention_mask_func(attention_scores, attention_mask):
    attention_scores.masked_fill_(attention_mask, -10000.0)
    return attention_scores


class FusedScaleMaskSoftmax(nn.Module):
    def __init__(self, mask_func, softmax_in_fp32=True, scale=None):
        super().__init__()
        self.mask_func = mask_func
        self.softmax_in_fp32 = softmax_in_fp32
        self.scale = scale

    def forward(self, input, mask):
        return self.forward_torch_softmax(input, mask)

    def forward_torch_softmax(self, input, mask):
        if self.softmax_in_fp32:
            input = input.float()
        if self.scale is not None:
            input = input * self.scale
        mask_output = self.mask_func(input, mask) if mask is not None else input
        probs = torch.nn.Softmax(dim=-1)(mask_output)
        return probs


class CoreAttention(nn.Module):
    def __init__(self, head_dim=16):
        super().__init__()
        self.norm_factor = math.sqrt(head_dim)
        self.scale_mask_softmax = FusedScaleMaskSoftmax(attention_mask_func)

    def forward(self, query_layer, key_layer, value_layer, attention_mask):
        # [b, np, sq, sk]
        output_size = (query_layer.size(1), query_layer.size(2), query_layer.size(0), key_layer.size(0))
        # [sq, b, np, hn] -> [sq, b * np, hn]
        query_layer = query_layer.reshape(output_size[2], output_size[0] * output_size[1], -1)
        key_layer = key_layer.view(output_size[3], output_size[0] * output_size[1], -1)
        matmul_input_buffer = torch.empty(output_size[0] * output_size[1], output_size[2], output_size[3],
                                          dtype=query_layer.dtype, device=query_layer.device)
        matmul_result = torch.baddbmm(matmul_input_buffer, query_layer.transpose(0, 1),
                                      key_layer.transpose(0, 1).transpose(1, 2),
                                      beta=0.0, alpha=(1.0 / self.norm_factor))
        attention_scores = matmul_result.view(*output_size)
        attention_probs = self.scale_mask_softmax(attention_scores, attention_mask)
        output_size = (value_layer.size(1), value_layer.size(2), query_layer.size(0), value_layer.size(3))
        value_layer = value_layer.view(value_layer.size(0), output_size[0] * output_size[1], -1)
        attention_probs = attention_probs.view(output_size[0] * output_size[1], output_size[2], -1)
        context_layer = torch.bmm(attention_probs, value_layer.transpose(0, 1))
        context_layer = context_layer.view(*output_size)
        context_layer = context_layer.permute(2, 0, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (output_size[1] * output_size[3],)
        return context_layer.view(*new_context_layer_shape)


class Model(nn.Module):
    def __init__(self, seq=8):
        super().__init__()
        self.core_attention = CoreAttention()
        attention_mask = torch.tril(torch.ones((1, seq, seq))).view(1, 1, seq, seq)
        self.register_buffer("attention_mask", attention_mask < 0.5)

    def forward(self, q, k, v):
        return self.core_attention(q, k, v, self.attention_mask)


def get_inputs():
    return [torch.randn(8, 2, 2, 16), torch.randn(8, 2, 2, 16), torch.randn(8, 2, 2, 16)]
