"""Triton starters, one per kernel type, each a valid `kernel.py` (see autokernel.kernelfile)."""

from __future__ import annotations

from pathlib import Path

from autokernel.ops import KERNEL_TYPES

KERNELS_DIR = Path(__file__).resolve().parent


def starter_path(kernel_type: str, backend: str = "triton") -> Path:
    if kernel_type not in KERNEL_TYPES:
        raise KeyError(f"unknown kernel type {kernel_type!r}")
    if backend != "triton":
        raise NotImplementedError(f"no {backend} starters yet; only triton")
    return KERNELS_DIR / f"{kernel_type}.py"
