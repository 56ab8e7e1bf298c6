"""MiniCPM's decoder (HF remote code): embeddings times scale_emb, each sublayer's output scaled by
scale_depth / sqrt(num_hidden_layers) before it is added to the residual
(`hidden = residual + h * (scale_depth / math.sqrt(L))`), its RMSNorm the functional
`rms_layernorm` (fp32 variance, rsqrt, cast back, times weight). The post-attention norm reads
the first residual sum and the model's final norm the second: two add_rmsnorm calls; the input
norm reads the scaled embeddings (an rmsnorm)."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'add_rmsnorm', 'params': {'eps': 1e-05}, 'calls': 2,
            'also': ['rmsnorm', 'matmul']}


def rms_layernorm(hidden, weight, eps):
    old_dtype = hidden.dtype
    variance = hidden.to(torch.float32).pow(2).mean(dim=-1, keepdim=True)
    hidden = (hidden * torch.rsqrt(variance + eps)).to(old_dtype)
    return hidden * weight


class MiniCPMRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        return rms_layernorm(hidden_states, self.weight, self.variance_epsilon)


class MiniCPMDecoderLayer(nn.Module):
    def __init__(self, hidden_size=32, scale_depth=1.4, num_hidden_layers=4):
        super().__init__()
        self.self_attn_o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.mlp_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.input_layernorm = MiniCPMRMSNorm(hidden_size)
        self.post_attention_layernorm = MiniCPMRMSNorm(hidden_size)
        self.scale_depth = scale_depth
        self.num_hidden_layers = num_hidden_layers

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn_o_proj(hidden_states)
        hidden_states = residual + hidden_states * (self.scale_depth / math.sqrt(self.num_hidden_layers))
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp_proj(hidden_states)
        hidden_states = residual + hidden_states * (self.scale_depth / math.sqrt(self.num_hidden_layers))
        return hidden_states


class Model(nn.Module):
    def __init__(self, vocab_size=100, hidden_size=32, scale_emb=12.0):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList([MiniCPMDecoderLayer(hidden_size)])
        self.norm = MiniCPMRMSNorm(hidden_size)
        self.scale_emb = scale_emb

    def forward(self, input_ids):
        hidden_states = self.embed_tokens(input_ids) * self.scale_emb
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return self.norm(hidden_states)


def get_inputs():
    return [torch.randint(0, 100, (2, 8))]
