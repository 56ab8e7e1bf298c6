"""GPT-BigCode's eager multi-query attention (HF GPTBigCodeAttention._attn, multi_query=True): the
query reshaped to [B, S·H, D] (heads folded into the rows), the one key [B, D, K] (already
transposed), torch.baddbmm(empty, q, k, beta=0, alpha=scale_factor) viewed [B, S, H, K], then
upcast_masked_softmax: .to(float32) * unscale, torch.where(mask, x, finfo.min) with the causal
mask from the tril bias buffer (bias[None, K - S:K, :K].unsqueeze(2)), softmax(-1) cast back;
then bmm(attn.view(B, S·H, K), value [B, K, D]). One KV head for 4 query heads."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'flash_attention', 'params': {'causal': True, 'kv_heads': 1, 'scale': 0.25},
            'calls': 1, 'also': ['matmul']}
# Measured held out (heldout3, first run): not recognized; now it is (the heads-in-rows
# layout, its [1, S, 1, K] causal mask read over the scores' [B, S, H, K] view).


def upcast_masked_softmax(x, mask, mask_value, scale, softmax_dtype):
    input_dtype = x.dtype
    x = x.to(softmax_dtype) * scale
    x = torch.where(mask, x, mask_value)
    x = torch.nn.functional.softmax(x, dim=-1).to(input_dtype)
    return x


class GPTBigCodeAttention(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4, max_positions=32):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.kv_dim = self.head_dim
        self.c_attn = nn.Linear(embed_dim, embed_dim + 2 * self.kv_dim)
        self.c_proj = nn.Linear(embed_dim, embed_dim)
        self.register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)),
                             persistent=False)
        self.layer_idx = 0

    def _attn(self, query, key, value, attention_mask):
        dtype = query.dtype
        softmax_dtype = torch.float32
        upcast = dtype != softmax_dtype
        unscale = self.layer_idx + 1 if upcast else 1
        scale_factor = unscale ** -1
        scale_factor /= self.head_dim ** 0.5
        query_shape = query.shape
        batch_size = query_shape[0]
        key_length = key.size(-1)
        query_length = query_shape[1]
        attn_shape = (batch_size, query_length, self.num_heads, key_length)
        attn_view = (batch_size, query_length * self.num_heads, key_length)
        query = query.reshape(batch_size, query_length * self.num_heads, self.head_dim)
        attn_weights = torch.empty(attn_view, device=query.device, dtype=query.dtype)
        attn_weights = torch.baddbmm(attn_weights, query, key, beta=0, alpha=scale_factor).view(attn_shape)
        mask_value = torch.full([], torch.finfo(softmax_dtype).min, dtype=softmax_dtype, device=attn_weights.device)
        attn_weights = upcast_masked_softmax(attn_weights, attention_mask, mask_value, unscale, softmax_dtype)
        attn_output = torch.bmm(attn_weights.view(attn_view), value).view(query_shape)
        return attn_output

    def forward(self, hidden_states):
        query, key_value = self.c_attn(hidden_states).split((self.embed_dim, 2 * self.kv_dim), dim=2)
        key, value = key_value.split((self.head_dim, self.head_dim), dim=-1)
        query_length = key_length = hidden_states.shape[1]
        attention_mask = self.bias[None, key_length - query_length : key_length, :key_length].unsqueeze(2)
        attn_output = self._attn(query, key.transpose(-1, -2), value, attention_mask)
        return self.c_proj(attn_output)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = GPTBigCodeAttention()

    def forward(self, hidden_states):
        return self.attn(hidden_states)


def get_inputs():
    return [torch.randn(2, 8, 64)]
