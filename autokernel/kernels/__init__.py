"""Starters, one per kernel type, each a valid `kernel.py` (see autokernel.kernelfile): Triton in
this folder (the default), CUDA C++ in cuda/ (issue 15: some kernel types so far)."""

from __future__ import annotations

from pathlib import Path

from autokernel.ops import KERNEL_TYPES

KERNELS_DIR = Path(__file__).resolve().parent
CUDA_KERNELS_DIR = KERNELS_DIR / "cuda"


def starter_path(kernel_type: str, backend: str = "triton") -> Path:
    if kernel_type not in KERNEL_TYPES:
        raise KeyError(f"unknown kernel type {kernel_type!r}")
    if backend == "triton":
        return KERNELS_DIR / f"{kernel_type}.py"
    if backend == "cuda":
        path = CUDA_KERNELS_DIR / f"{kernel_type}.py"
        if not path.is_file():
            have = ", ".join(sorted(p.stem for p in CUDA_KERNELS_DIR.glob("*.py")))
            raise NotImplementedError(f"no CUDA starter for {kernel_type} yet (CUDA starters: "
                                      f"{have})")
        return path
    raise NotImplementedError(f"no {backend} starters; backends: triton, cuda")
