"""Reformer's LocalSelfAttention (HF): keys scaled by 1/sqrt(D), the sequence split into chunks of
8, each chunk's keys and values the chunk itself plus the one before (_look_adjacent: the chunk
rolled by one and concatenated), causal by position indices (torch.ge(q_idx, k_idx)) applied with
torch.where(mask, dots, -1e9), softmax written as exp(dots - logsumexp(dots, -1)), @ v. A banded
(chunk-local) attention over 16 keys per query chunk: no flash_attention; its softmax is one
softmax call, its products matmuls."""

import torch
from torch import nn

EXPECTED = {'kernel_type': 'softmax', 'params': {}, 'calls': 1, 'also': ['matmul']}


def _look_adjacent(vectors, num_chunks_before, num_chunks_after):
    slices = []
    for i in range(-num_chunks_before, num_chunks_after + 1):
        if i == 0:
            slices.append(vectors)
        else:
            slices.append(torch.cat([vectors[:, :, i:, ...], vectors[:, :, :i, ...]], dim=2))
    return torch.cat(slices, dim=3)


class LocalSelfAttention(nn.Module):
    def __init__(self, hidden_size=64, num_heads=4, chunk_length=8):
        super().__init__()
        self.num_attention_heads = num_heads
        self.attention_head_size = hidden_size // num_heads
        self.chunk_length = chunk_length
        self.num_chunks_before = 1
        self.num_chunks_after = 0
        self.query = nn.Linear(hidden_size, hidden_size, bias=False)
        self.key = nn.Linear(hidden_size, hidden_size, bias=False)
        self.value = nn.Linear(hidden_size, hidden_size, bias=False)
        self.register_buffer("mask_value_float32", torch.tensor(-1e9), persistent=False)

    def _split_heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.num_attention_heads, self.attention_head_size).transpose(1, 2)

    def _split_seq(self, x, b):
        return x.reshape(b, self.num_attention_heads, -1, self.chunk_length, self.attention_head_size)

    def forward(self, hidden_states):
        batch_size, sequence_length, _ = hidden_states.shape
        query_vectors = self._split_heads(self.query(hidden_states))
        key_vectors = self._split_heads(self.key(hidden_states))
        value_vectors = self._split_heads(self.value(hidden_states))
        key_vectors = key_vectors / torch.sqrt(torch.tensor(self.attention_head_size, dtype=key_vectors.dtype))
        indices = torch.arange(sequence_length).repeat(batch_size, self.num_attention_heads, 1)
        query_vectors = self._split_seq(query_vectors, batch_size)
        key_vectors = self._split_seq(key_vectors, batch_size)
        value_vectors = self._split_seq(value_vectors, batch_size)
        query_indices = indices.reshape(batch_size, self.num_attention_heads, -1, self.chunk_length)
        key_indices = query_indices
        key_vectors = _look_adjacent(key_vectors, self.num_chunks_before, self.num_chunks_after)
        value_vectors = _look_adjacent(value_vectors, self.num_chunks_before, self.num_chunks_after)
        key_indices = _look_adjacent(key_indices, self.num_chunks_before, self.num_chunks_after)
        query_key_dots = torch.matmul(query_vectors, key_vectors.transpose(-1, -2))
        mask = torch.ge(query_indices.unsqueeze(-1), key_indices.unsqueeze(-2))
        query_key_dots = torch.where(mask, query_key_dots, self.mask_value_float32)
        logits = torch.logsumexp(query_key_dots, dim=-1, keepdim=True)
        attention_probs = torch.exp(query_key_dots - logits)
        out_vectors = torch.matmul(attention_probs, value_vectors)
        out_vectors = out_vectors.flatten(2, 3)
        return out_vectors.transpose(1, 2).reshape(batch_size, sequence_length, -1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attention = LocalSelfAttention()

    def forward(self, hidden_states):
        return self.self_attention(hidden_states)


def get_inputs():
    return [torch.randn(2, 32, 64)]
