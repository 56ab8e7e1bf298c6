"""verify's accuracy rule: the patched model's error against an oracle, next to the original's.

A model's output in fp16 differs from its exact value by accumulated rounding, which grows with
depth, so a fixed elementwise tolerance is either too tight for a deep model or too loose for a
shallow one. The yardstick is the original model itself: the patched model passes when its
relative error against the oracle is at most ERROR_GROWTH × the original's plus a floor of a few
units of the dtype's precision (see verify.py's module docstring).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

ERROR_GROWTH = 2.0
# Relative-error floor per dtype: 4 units of roundoff for fp16 (2^-11) and bf16 (2^-8); for fp32,
# where the original's own error can be ~1e-7, 1e-6 absorbs summation-order differences.
ERROR_FLOOR = {"fp16": 2e-3, "bf16": 1.6e-2, "fp32": 1e-6}
GRADIENT_FLOOR = {"fp16": 1e-2, "bf16": 6e-2, "fp32": 1e-5}


# ---------------------------------------------------------------------------------------------
# Accuracy


def output_tensors(output: Any) -> list[torch.Tensor]:
    """The floating-point tensors of a forward's output (tensor, tuple, dict, ModelOutput...)."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(output)
            if isinstance(t, torch.Tensor) and t.is_floating_point()]


def relative_error(values: list[torch.Tensor], exact: list[torch.Tensor]) -> float:
    """max over tensors of ||values - exact||₂ / ||exact||₂ (absolute where exact is all 0)."""
    import torch

    if len(values) != len(exact):
        return math.inf
    worst = 0.0
    for a, b in zip(values, exact):
        if a.shape != b.shape:
            return math.inf
        a64, b64 = a.detach().double(), b.detach().double()
        if not torch.isfinite(a64).all():
            return math.inf if torch.isfinite(b64).all() else math.nan
        scale = b64.norm().item()
        error = (a64 - b64).norm().item()
        worst = max(worst, error / scale if scale > 0 else error)
    return worst


@dataclass
class Agreement:
    """The patched model's error against the oracle's, next to the original model's."""

    error_original: float
    error_patched: float
    bound: float
    difference: float  # patched vs original, relative
    max_abs_difference: float
    oracle: str

    @property
    def passed(self) -> bool:
        return self.error_patched <= self.bound

    def to_dict(self) -> dict[str, Any]:
        return {"error_original": self.error_original, "error_patched": self.error_patched,
                "bound": self.bound, "difference": self.difference,
                "max_abs_difference": self.max_abs_difference, "oracle": self.oracle,
                "rule": f"error_patched <= {ERROR_GROWTH:g} x error_original + floor",
                "passed": self.passed}


def agreement(original: list[torch.Tensor], patched: list[torch.Tensor],
              oracle: list[torch.Tensor], floor: float, oracle_name: str) -> Agreement:
    error_original = relative_error(original, oracle)
    error_patched = relative_error(patched, oracle)
    max_abs = max(((a.double() - b.double()).abs().max().item()
                   for a, b in zip(patched, original) if a.shape == b.shape and a.numel()),
                  default=0.0)
    return Agreement(error_original, error_patched, ERROR_GROWTH * error_original + floor,
                     relative_error(patched, original), max_abs, oracle_name)


def oracle_dtype(dtype: torch.dtype) -> torch.dtype:
    import torch

    return torch.float64 if dtype in (torch.float32, torch.float64) else torch.float32


@contextmanager
def full_precision() -> Any:
    """Matmuls in true fp32 (no TF32) while the oracle runs, whatever the user's setting."""
    import torch

    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def cast_inputs(inputs: Any, dtype: torch.dtype) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor)
                    and t.is_floating_point() else t, inputs)


def projection_loss(output: Any, weights: list[torch.Tensor]) -> torch.Tensor:
    """Σ <output_i, w_i>: every output element gets a gradient (a random direction)."""
    tensors = output_tensors(output)
    return sum((t.double() * w).sum() for t, w in zip(tensors, weights))


def parameter_gradients(model: nn.Module, inputs: Any, weights: list[torch.Tensor]
                        ) -> list[torch.Tensor]:
    import torch

    from autokernel.profiling.model_loader import call_forward

    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        projection_loss(call_forward(model, inputs), weights).backward()
    grads = [p.grad.detach().clone() for p in model.parameters()
             if p.requires_grad and p.grad is not None]
    model.zero_grad(set_to_none=True)
    return grads
