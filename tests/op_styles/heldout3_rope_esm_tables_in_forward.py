"""ESM-2's rotary embedding (HF EsmRotaryEmbedding): inv_freq buffer; forward(q, k) rebuilds the
tables from the key's length (t = arange(S), outer(t, inv_freq), cat((freqs, freqs), -1),
emb.cos()[None, None, :, :]) and applies apply_rotary_pos_emb(x, cos, sin): cos sliced to
x.shape[-2], (x * cos) + (rotate_half(x) * sin), rotate_half by x.chunk(2, dim=-1). The query is
scaled by head_dim^-½ first, as EsmSelfAttention does. On q and k: two calls."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'rotary_embedding', 'params': {'form': 'rotate_half'}, 'calls': 2}


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(x, cos, sin):
    cos = cos[:, :, : x.shape[-2], :]
    sin = sin[:, :, : x.shape[-2], :]
    return (x * cos) + (rotate_half(x) * sin)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def _update_cos_sin_tables(self, x, seq_dimension=2):
        seq_len = x.shape[seq_dimension]
        t = torch.arange(x.shape[seq_dimension], device=x.device).type_as(self.inv_freq)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1).to(x.device)
        return emb.cos()[None, None, :, :], emb.sin()[None, None, :, :]

    def forward(self, q, k):
        cos, sin = self._update_cos_sin_tables(k, seq_dimension=-2)
        return apply_rotary_pos_emb(q, cos, sin), apply_rotary_pos_emb(k, cos, sin)


class Model(nn.Module):
    def __init__(self, head_dim=16):
        super().__init__()
        self.attention_head_size = head_dim
        self.rotary_embeddings = RotaryEmbedding(dim=head_dim)

    def forward(self, query_layer, key_layer):
        query_layer = query_layer * self.attention_head_size ** -0.5
        return self.rotary_embeddings(query_layer, key_layer)


def get_inputs():
    return [torch.randn(2, 4, 12, 16), torch.randn(2, 4, 12, 16)]
