"""HF's `_update_causal_mask` without a padding mask: `causal_mask = torch.full((T, T), min_dtype)`,
`torch.triu(causal_mask, diagonal=1)`, `causal_mask *= torch.arange(T) > cache_position.reshape(-1,
1)` in place, `causal_mask[None, None, :, :].expand(B, 1, -1, -1)`; the eager attention adds
`causal_mask[:, :, :, : key_states.shape[-2]]` to `q @ kᵀ * scaling` and upcasts the softmax."""

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True}, 'calls': 1}


def eager_attention_forward(query, key, value, attention_mask, scaling):
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=0.0, training=False)
    return torch.matmul(attn_weights, value)


class Model(nn.Module):
    def __init__(self, head_dim=64):
        super().__init__()
        self.scaling = head_dim ** -0.5

    def _update_causal_mask(self, input_tensor, cache_position):
        dtype, device = input_tensor.dtype, input_tensor.device
        min_dtype = torch.finfo(dtype).min
        batch, seq = input_tensor.shape[0], input_tensor.shape[2]
        causal_mask = torch.full((seq, seq), fill_value=min_dtype, dtype=dtype, device=device)
        causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(seq, device=device) > cache_position.reshape(-1, 1)
        return causal_mask[None, None, :, :].expand(batch, 1, -1, -1)

    def forward(self, q, k, v):
        cache_position = torch.arange(0, q.shape[2], device=q.device)
        mask = self._update_causal_mask(q, cache_position)
        return eager_attention_forward(q, k, v, mask, self.scaling)


def get_inputs():
    return [torch.randn(2, 8, 128, 64) for _ in range(3)]
