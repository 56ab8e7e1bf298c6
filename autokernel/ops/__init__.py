"""The op registry: one `OpSpec` per kernel type, each in `autokernel/ops/<kernel_type>.py`."""

from __future__ import annotations

import importlib

from autokernel.ops.spec import OpSpec

KERNEL_TYPES: tuple[str, ...] = (
    "matmul",
    "flash_attention",
    "fused_mlp",
    "softmax",
    "layernorm",
    "rmsnorm",
    "cross_entropy",
    "rotary_embedding",
    "reduce",
)


def get_spec(kernel_type: str) -> OpSpec:
    if kernel_type not in KERNEL_TYPES:
        raise KeyError(f"unknown kernel type {kernel_type!r}; known: {', '.join(KERNEL_TYPES)}")
    return importlib.import_module(f"autokernel.ops.{kernel_type}").SPEC


def all_specs() -> dict[str, OpSpec]:
    return {name: get_spec(name) for name in KERNEL_TYPES}
