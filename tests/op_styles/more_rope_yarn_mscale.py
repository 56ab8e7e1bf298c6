"""HF's YaRN rotary (`_compute_yarn_parameters`): inv_freq blended between interpolation and
extrapolation by a linear ramp over the correction range, and cos/sin multiplied by the attention
factor (0.1·ln(s) + 1); apply_rotary_pos_emb's rotate-half on q and k. The tables carry the
scaling; the rotation is RoPE's."""

import math

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'rotate_half'}, 'calls': 2}


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def compute_yarn_parameters(dim, base=10000.0, factor=4.0, original_max=32,
                            beta_fast=32, beta_slow=1):
    attention_factor = 0.1 * math.log(factor) + 1.0

    def find_correction_dim(num_rotations):
        return (dim * math.log(original_max / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(find_correction_dim(beta_fast)), 0)
    high = min(math.ceil(find_correction_dim(beta_slow)), dim - 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (factor * pos_freqs)
    if low == high:
        high += 0.001
    linear_func = (torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)
    ramp = torch.clamp(linear_func, 0, 1)
    extrapolation_factor = 1 - ramp
    inv_freq = (inv_freq_interpolation * (1 - extrapolation_factor)
                + inv_freq_extrapolation * extrapolation_factor)
    return inv_freq, attention_factor


class YarnRotaryEmbedding(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        inv_freq, self.attention_scaling = compute_yarn_parameters(dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary_emb = YarnRotaryEmbedding()

    def forward(self, q, k):
        position_ids = torch.arange(q.shape[2]).unsqueeze(0)
        cos, sin = self.rotary_emb(q, position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)


def get_inputs():
    return [torch.randn(2, 4, 20, 32), torch.randn(2, 4, 20, 32)]
