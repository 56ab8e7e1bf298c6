"""HF GPT-J's rotary: a constant sin|cos table (create_sinusoidal_positions) repeated over the batch
and gathered by position ids (torch.gather(embed_positions, 1, position_ids...repeat)), split into
sin and cos, repeat_interleave'd by 2; rotate_every_two (stack((-x2, x1), -1).flatten(-2)) on the
first rotary_dim (8 of head_dim 16) of q and k in the [B, S, H, D] layout, the rest concatenated back."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding',
            'params': {'form': 'interleaved', 'rotary_dim': 8, 'layout': 'BSHD'}, 'calls': 2}


def create_sinusoidal_positions(num_pos, dim):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j", torch.arange(num_pos, dtype=torch.int64).float(), inv_freq).float()
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def apply_rotary_pos_emb(tensor, sin, cos):
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return (tensor * cos) + (rotate_every_two(tensor) * sin)


class GPTJRotary(nn.Module):
    def __init__(self, rotary_dim=8, max_positions=32):
        super().__init__()
        self.rotary_dim = rotary_dim
        self.embed_positions = create_sinusoidal_positions(max_positions, rotary_dim)

    def _get_embed_positions(self, position_ids):
        embed_positions = self.embed_positions
        if embed_positions.device != position_ids.device:
            embed_positions = embed_positions.to(position_ids.device)
            self.embed_positions = embed_positions
        return embed_positions.repeat(position_ids.shape[0], 1, 1)

    def forward(self, query, key, position_ids):
        embed_positions = self._get_embed_positions(position_ids)
        repeated_position_ids = position_ids.unsqueeze(-1).repeat(1, 1, embed_positions.shape[-1])
        sincos = torch.gather(embed_positions, 1, repeated_position_ids)
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)

        k_rot = key[:, :, :, : self.rotary_dim]
        k_pass = key[:, :, :, self.rotary_dim :]
        q_rot = query[:, :, :, : self.rotary_dim]
        q_pass = query[:, :, :, self.rotary_dim :]
        k_rot = apply_rotary_pos_emb(k_rot, sin, cos)
        q_rot = apply_rotary_pos_emb(q_rot, sin, cos)
        key = torch.cat([k_rot, k_pass], dim=-1)
        query = torch.cat([q_rot, q_pass], dim=-1)
        return query, key


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary = GPTJRotary()

    def forward(self, query, key):
        seq_length = query.shape[1]
        position_ids = torch.arange(0, seq_length, dtype=torch.long, device=query.device).unsqueeze(0)
        return self.rotary(query, key, position_ids)


def get_inputs():
    return [torch.randn(2, 8, 4, 16), torch.randn(2, 8, 4, 16)]
