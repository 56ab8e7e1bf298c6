"""The op registry: one `OpSpec` per kernel type, each in `autokernel/ops/<kernel_type>.py`.

Every module here is an op entry, except the shared helpers in `HELPER_MODULES`: adding a kernel
type is adding its file (and its starter, `autokernel/kernels/<kernel_type>.py`). The first nine
keep the order they have always been listed in; later ones follow, by name.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from autokernel.ops.spec import OpSpec

if TYPE_CHECKING:
    from autokernel.integrate.integration import Integration

FIRST_KERNEL_TYPES = (
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
HELPER_MODULES = frozenset({"spec", "rowwise", "residual_inputs"})


def _discovered() -> tuple[str, ...]:
    names = {m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)])}
    return tuple(sorted(names - HELPER_MODULES - set(FIRST_KERNEL_TYPES)))


KERNEL_TYPES: tuple[str, ...] = FIRST_KERNEL_TYPES + _discovered()


def _entry(kernel_type: str) -> ModuleType:
    if kernel_type not in KERNEL_TYPES:
        raise KeyError(f"unknown kernel type {kernel_type!r}; known: {', '.join(KERNEL_TYPES)}")
    return importlib.import_module(f"autokernel.ops.{kernel_type}")


def get_spec(kernel_type: str) -> OpSpec:
    return _entry(kernel_type).SPEC


def get_integration(kernel_type: str) -> Integration:
    """How a finished kernel of this type joins a model (its file's integration section)."""
    return _entry(kernel_type).INTEGRATION


def all_specs() -> dict[str, OpSpec]:
    return {name: get_spec(name) for name in KERNEL_TYPES}
