"""A ViT-B/16-style image encoder: patch embedding, pre-norm blocks, explicit attention, GELU MLP.

KernelBench convention: `Model`, `get_inputs()`, `get_init_inputs()`.

Models the Vision Transformer of Dosovitskiy et al. (ViT-B/16) with fewer layers: a 16x16
stride-16 convolution turns a 224x224 image into 196 patch tokens, a learned class token and
position embeddings make 197 tokens; each block is LayerNorm → multi-head self-attention written
out as `softmax(q @ k.transpose(-2, -1) * scale) @ v` (no SDPA, no mask) → residual, LayerNorm →
Linear → GELU → Linear → residual; a final LayerNorm and a linear classifier on the class token.

Sizes (`CONFIG`): hidden 768, 12 heads of 64, MLP 3072, 2 layers, 1000 classes; input a batch of
32 images [32, 3, 224, 224]. About 15 M parameters: 30 MB in fp16. `TINY` (32x32 images, patch 8,
hidden 64, 4 heads) is the same model at CPU-test size: build it with `init_inputs_for(TINY)`
and `inputs_for(TINY, batch)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ViTConfig:
    image_size: int
    patch_size: int
    d_model: int
    n_layers: int
    n_heads: int
    mlp_hidden: int
    n_classes: int
    norm_eps: float = 1e-6


CONFIG = ViTConfig(image_size=224, patch_size=16, d_model=768, n_layers=2, n_heads=12,
                   mlp_hidden=3072, n_classes=1000)
TINY = ViTConfig(image_size=32, patch_size=8, d_model=64, n_layers=2, n_heads=4, mlp_hidden=256,
                 n_classes=10)
BATCH = 32


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(-2, -1)) * self.scale
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, s, d))


class MLP(nn.Module):
    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class EncoderBlock(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = SelfAttention(cfg.d_model, cfg.n_heads)
        self.norm2 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = MLP(cfg.d_model, cfg.mlp_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    """Images [B, 3, H, W] → class logits [B, n_classes]."""

    def __init__(self, image_size: int, patch_size: int, d_model: int, n_layers: int,
                 n_heads: int, mlp_hidden: int, n_classes: int, norm_eps: float = 1e-6) -> None:
        super().__init__()
        cfg = ViTConfig(image_size, patch_size, d_model, n_layers, n_heads, mlp_hidden,
                        n_classes, norm_eps)
        n_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(3, d_model, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, n_patches + 1, d_model) * 0.02)
        self.blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model, eps=norm_eps)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        patches = self.patch_embed(images).flatten(2).transpose(1, 2)  # [B, N, d]
        cls = self.cls_token.expand(patches.shape[0], -1, -1)
        x = torch.cat((cls, patches), dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


def init_inputs_for(cfg: ViTConfig) -> list:
    return [cfg.image_size, cfg.patch_size, cfg.d_model, cfg.n_layers, cfg.n_heads,
            cfg.mlp_hidden, cfg.n_classes, cfg.norm_eps]


def inputs_for(cfg: ViTConfig, batch: int) -> list:
    return [torch.randn(batch, 3, cfg.image_size, cfg.image_size)]


def get_inputs() -> list:
    return inputs_for(CONFIG, BATCH)


def get_init_inputs() -> list:
    return init_inputs_for(CONFIG)
