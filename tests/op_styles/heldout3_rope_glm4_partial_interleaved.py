"""GLM-4's RoPE (HF Glm apply_rotary_pos_emb): cos and sin [B, S, rotary_dim] from the rotary
module, each cut to its first half and repeat_interleave(2, dim=-1)'d (pairwise layout); the head
split into q_rot (rotary_dim = 8 of head_dim 16, partial_rotary_factor 0.5) and q_pass;
q_rot * cos + rotate_half(q_rot) * sin with GLM's interleaved rotate_half (x[..., 0::2],
x[..., 1::2], stack((-x2, x1), -1).flatten(-2)); cat with the pass-through. On q and k."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'interleaved', 'rotary_dim': 8},
            'calls': 2}


def rotate_half(x):
    x1 = x[..., 0::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
    sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = (q_rot * cos) + (rotate_half(q_rot) * sin)
    k_embed = (k_rot * cos) + (rotate_half(k_rot) * sin)
    q_embed = torch.cat([q_embed, q_pass], dim=-1)
    k_embed = torch.cat([k_embed, k_pass], dim=-1)
    return q_embed, k_embed


class GlmRotaryEmbedding(nn.Module):
    def __init__(self, dim=8, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary_emb = GlmRotaryEmbedding()

    def forward(self, q, k):
        position_ids = torch.arange(q.shape[2]).unsqueeze(0).expand(q.shape[0], -1)
        cos, sin = self.rotary_emb(q, position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)


def get_inputs():
    return [torch.randn(2, 4, 12, 16), torch.randn(2, 4, 12, 16)]
