"""GPT-2 small (124M): 12 layers, d=768, 12 heads, vocab 50257, no `transformers` needed.

KernelBench convention: `Model`, `get_inputs()`, `get_init_inputs()`.

Pre-norm blocks (LayerNorm → causal self-attention through `F.scaled_dot_product_attention`,
LayerNorm → GELU MLP with 4x width), learned position embeddings, a final LayerNorm and an output
head tied to the token embedding, as in OpenAI's GPT-2. Weights are random: the profile depends
on shapes, not values.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB_SIZE = 50257
N_POSITIONS = 1024
D_MODEL = 768
N_LAYERS = 12
N_HEADS = 12
LAYER_NORM_EPS = 1e-5
BATCH = 4
SEQ_LEN = 256


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)  # q, k, v in one GEMM
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2)
                   for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(out.transpose(1, 2).reshape(b, s, d))


class MLP(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU(approximate="tanh")  # GPT-2's "gelu_new"
        self.c_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, eps: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model, eps=eps)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln_2 = nn.LayerNorm(d_model, eps=eps)
        self.mlp = MLP(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Model(nn.Module):
    """Token ids [B, S] → logits [B, S, vocab]."""

    def __init__(self, vocab_size: int = VOCAB_SIZE, n_positions: int = N_POSITIONS,
                 d_model: int = D_MODEL, n_layers: int = N_LAYERS, n_heads: int = N_HEADS,
                 eps: float = LAYER_NORM_EPS) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(n_positions, d_model)
        self.h = nn.ModuleList(Block(d_model, n_heads, eps) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model, eps=eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def get_inputs() -> list:
    return [torch.randint(0, VOCAB_SIZE, (BATCH, SEQ_LEN))]


def get_init_inputs() -> list:
    return [VOCAB_SIZE, N_POSITIONS, D_MODEL, N_LAYERS, N_HEADS, LAYER_NORM_EPS]
