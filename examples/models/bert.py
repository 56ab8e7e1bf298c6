"""BERT-base encoder: 12 layers, d=768, 12 heads, FFN 3072, vocab 30522, no `transformers` needed.

KernelBench convention: `Model`, `get_inputs()`, `get_init_inputs()`.

Post-norm encoder layers as in the original BERT: word + position + token-type embeddings and a
LayerNorm, then per layer bidirectional (non-causal) self-attention through
`F.scaled_dot_product_attention`, add & LayerNorm, a GELU feed-forward, add & LayerNorm. The
forward returns the last hidden states [B, S, 768]. Weights are random.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB_SIZE = 30522
MAX_POSITIONS = 512
TYPE_VOCAB_SIZE = 2
D_MODEL = 768
N_LAYERS = 12
N_HEADS = 12
FFN = 3072
LAYER_NORM_EPS = 1e-12
BATCH = 4
SEQ_LEN = 256


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.output = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (proj(x).view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2)
                   for proj in (self.query, self.key, self.value))
        out = F.scaled_dot_product_attention(q, k, v)  # bidirectional: no mask, not causal
        return self.output(out.transpose(1, 2).reshape(b, s, d))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, n_heads: int, ffn: int, eps: float) -> None:
        super().__init__()
        self.attention = SelfAttention(d_model, n_heads)
        self.attention_norm = nn.LayerNorm(d_model, eps=eps)
        self.intermediate = nn.Linear(d_model, ffn)
        self.output = nn.Linear(ffn, d_model)
        self.output_norm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention(x))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class Model(nn.Module):
    """Token ids [B, S] → hidden states [B, S, d_model]."""

    def __init__(self, vocab_size: int = VOCAB_SIZE, max_positions: int = MAX_POSITIONS,
                 d_model: int = D_MODEL, n_layers: int = N_LAYERS, n_heads: int = N_HEADS,
                 ffn: int = FFN, eps: float = LAYER_NORM_EPS) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d_model)
        self.position_embeddings = nn.Embedding(max_positions, d_model)
        self.token_type_embeddings = nn.Embedding(TYPE_VOCAB_SIZE, d_model)
        self.embeddings_norm = nn.LayerNorm(d_model, eps=eps)
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads, ffn, eps)
                                    for _ in range(n_layers))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        token_types = torch.zeros_like(input_ids)  # a single segment
        x = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_types))
        x = self.embeddings_norm(x)
        for layer in self.layers:
            x = layer(x)
        return x


def get_inputs() -> list:
    return [torch.randint(0, VOCAB_SIZE, (BATCH, SEQ_LEN))]


def get_init_inputs() -> list:
    return [VOCAB_SIZE, MAX_POSITIONS, D_MODEL, N_LAYERS, N_HEADS, FFN, LAYER_NORM_EPS]
