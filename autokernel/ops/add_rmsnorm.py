"""add_rmsnorm: h = x + residual; y = h / sqrt(mean(h²) + eps) * weight over the last dim of
x[M, N], returning (y, h): the normed value and the updated residual stream, as every pre-norm
transformer block writes it (`h = x + attn(x); y = norm(h)`).

A fused kernel reads x and residual once and writes h and y, where PyTorch runs an add (read 2,
write 1) and then a norm (read 1, write 1). h is rounded to x's dtype before it is normalized,
as the unfused model stores it. The profiler claims an aten::add followed by an RMSNorm of its
result as one call (`profiling/residual_add.py`); verify defers the add inside the target's
modules and hands it to the norm module (`integrate/residual_norm.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.integrate.integration import CallRoute, FusedAddRoute, Integration, Plan
from autokernel.integrate.routing import RoutedKernel
from autokernel.integrate.route_helpers import probe_close, probe_passes, probe_tensor
from autokernel.integrate.plans import module_attribute
from autokernel.integrate.residual_norm import (
    ADD_FUNCTIONS, FusedNormTap, PendingSum, defer_add, fake_two_like_first, fused_norm_plan,
    handwritten_norm,
)
from autokernel.ops.residual_inputs import (
    cancelling_pair, large_residual_pair, mixed_scale_pair, residual_input_maker, residual_pair,
    rounded_sum,
)
from autokernel.ops.rowwise import (
    RESIDUAL_NORM_CPU_EDGE_SHAPES, RESIDUAL_NORM_EDGE_SHAPES, RESIDUAL_NORM_SWEEP,
    ROW_BENCH_SHAPES, ROW_CPU_SWEEP,
)
from autokernel.ops.spec import (
    AdversarialCase, Inputs, OpSpec, Shape, element_size, rows_and_width, sample,
)
from autokernel.ops.rmsnorm import RMSNORM_MODULE, SPEC as RMSNORM
from autokernel.profiling.graph_norms import add_norm_pattern
from autokernel.profiling.residual_add import NormAfterAdd, residual_add_pattern
from autokernel.profiling.site_routes import eps_mismatch

DIMS = ("M", "N")
DEFAULT_EPS = 1e-6


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                eps: float = DEFAULT_EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, h): h = x + residual summed in float32 (float64 for float64 inputs) and returned in
    x's dtype; y = h·rsqrt(mean(h²) + eps)·weight over the last dim, of h as returned (rounded to
    x's dtype, as the unfused model normalizes it), in float32, returned in x's dtype."""
    h = rounded_sum(x, residual)
    hc = h.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    rstd = torch.rsqrt(hc.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (hc * rstd * weight.to(hc.dtype)).to(x.dtype), h


def stock_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                      eps: float = DEFAULT_EPS) -> tuple[torch.Tensor, torch.Tensor]:
    h = x + residual
    return F.rms_norm(h, (h.shape[-1],), weight, eps), h


def _with_weight(x: torch.Tensor, residual: torch.Tensor, dtype: torch.dtype,
                 generator: torch.Generator, eps: float) -> Inputs:
    # Trained-looking gains around 1, random (all-ones would hide a kernel that skips them).
    weight = 1.0 + 0.25 * sample((x.shape[-1],), torch.float32, x.device, generator, "normal")
    return (x.to(dtype), residual.to(dtype), weight.to(dtype), eps)


make_inputs = residual_input_maker(residual_pair, _with_weight, DEFAULT_EPS)


def flops(shape: Shape) -> float:
    # 5 per element: the add, then rmsnorm's square-and-sum, scale by 1/rms, multiply by weight.
    m, n = rows_and_width(shape)
    return 5.0 * m * n


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    m, n = rows_and_width(shape)
    return (4.0 * m * n + n) * element_size(dtype)  # x, residual, weight read; h, y written


ADVERSARIAL = (
    AdversarialCase(
        "large_residual",
        "x and residual uniform in ±3e4: h up to 6e4 (near fp16 max), h² overflows fp16 unless "
        "the add and the squares are done in float32",
        residual_input_maker(large_residual_pair, _with_weight, DEFAULT_EPS),
    ),
    AdversarialCase(
        "cancelling_rows",
        "x = -residual, plus 1e-4 noise on every third row: h exactly zero (y must be 0, not "
        "NaN) or tiny (mean h² ≪ eps, so eps must sit inside the sqrt); normalizing x or the "
        "residual alone is far off",
        residual_input_maker(cancelling_pair, _with_weight, DEFAULT_EPS),
    ),
    AdversarialCase(
        "mixed_row_scales",
        "each row scaled by its own 10^k, k in -4..3: per-row statistics must not leak",
        residual_input_maker(mixed_scale_pair, _with_weight, DEFAULT_EPS),
    ),
)


def liger_add_rmsnorm() -> Callable[..., Any] | None:
    """Liger's fused add + RMSNorm (LigerFusedAddRMSNormFunction: (X, R, W, eps) -> (Y, R'))
    where the installed Liger has it."""
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    except ImportError:
        return None

    def run(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
            eps: float = DEFAULT_EPS) -> Any:
        return LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps)

    return run


# The norm the add feeds: the rmsnorm type's ops, called by nn.RMSNorm or as F.rms_norm.
NORM = NormAfterAdd("rmsnorm", tuple(RMSNORM.aten_ops), RMSNORM_MODULE, "F.rms_norm")


SPEC = OpSpec(
    name="add_rmsnorm",
    dims=DIMS,
    reference=add_rmsnorm,
    stock=stock_add_rmsnorm,
    liger=liger_add_rmsnorm,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=False,
    smoke_shape=(4, 37),
    sweep=RESIDUAL_NORM_SWEEP,
    cpu_sweep=ROW_CPU_SWEEP,
    edge_shapes=RESIDUAL_NORM_EDGE_SHAPES,
    cpu_edge_shapes=RESIDUAL_NORM_CPU_EDGE_SHAPES,
    bench_shapes=ROW_BENCH_SHAPES,
    adversarial=ADVERSARIAL,
    patterns=(residual_add_pattern("add_rmsnorm", NORM),),
    graph_patterns=(add_norm_pattern("add_rmsnorm", "rmsnorm"),),
    site_route=NORM.site_route,
    param_mismatch=eps_mismatch,
    outputs=2,
    notes="add_rmsnorm over the last dim: h = x + residual, y = h·rsqrt(mean(h²) + eps)·weight "
    "(eps 1e-6 unless the model says otherwise), returning (y, h); FLOPs = 5·M·N; bytes = read "
    "x, residual, weight + write y, h.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


def _add_rmsnorm_recompute(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                           eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward's differentiable path: the unfused model's add and norm, in float32."""
    h = x + residual
    hc = h.float()
    y = hc * torch.rsqrt(hc.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype), h


def _computes_rmsnorm(module: nn.Module, details: dict[str, Any], kernel: RoutedKernel) -> bool:
    """Does the module's own forward compute x·rsqrt(mean(x²) + eps)·weight on random inputs
    (the fused op's y at a zero residual)?"""
    weight = module.weight
    x = probe_tensor((3, weight.shape[0]), weight)
    eps = float(getattr(module, details["eps_attribute"]))
    y, _ = _add_rmsnorm_recompute(x, torch.zeros_like(x), weight, eps)
    # The class's forward: the instance's may already be another kernel's route (rmsnorm's).
    return probe_close(kernel, type(module).forward(module, x), y)


def _recognize_rmsnorm(module: nn.Module, kernel: RoutedKernel) -> dict[str, Any] | str | None:
    """nn.RMSNorm over the last dim, and a hand-written RMSNorm module that passes the probe;
    details name its eps attribute and width (the adds worth deferring)."""
    rms_norm_class = getattr(nn, "RMSNorm", None)
    if rms_norm_class is not None and isinstance(module, rms_norm_class):
        if len(module.normalized_shape) != 1:
            return "normalizes over more than the last dim"
        return {"eps_attribute": "eps", "width": int(module.normalized_shape[0])}
    if isinstance(module, nn.LayerNorm):
        return None
    details = handwritten_norm(module)
    if details is None:
        return None
    if probe_passes(lambda: _computes_rmsnorm(module, details, kernel)):
        return {**details, "width": int(module.weight.shape[0])}
    return "probe: does not compute x·rsqrt(mean(x²) + eps)·weight over the last dim"


def _fused_rmsnorm_inputs(tap: FusedNormTap, pending: PendingSum) -> tuple[Any, ...]:
    x, residual = pending.operands
    module = tap.module
    return x, residual, getattr(module, tap.details["eps_attribute"]), \
        module_attribute(module, "weight")


def _plan_fused_rmsnorm(tap: FusedNormTap, x: torch.Tensor, residual: torch.Tensor,
                        eps: float | None, weight: torch.Tensor | None) -> Plan:
    return fused_norm_plan(tap, x, residual, eps, (weight, 1.0))


INTEGRATION = Integration(
    schema="(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)",
    fake=fake_two_like_first,
    backward="recompute",
    recompute=_add_rmsnorm_recompute,
    call_routes={"": (CallRoute(ADD_FUNCTIONS, defer_add),)},
    fused_add=FusedAddRoute(_recognize_rmsnorm, _fused_rmsnorm_inputs, _plan_fused_rmsnorm),
    example=lambda dtype: (torch.empty(64, 128, dtype=dtype), torch.empty(64, 128, dtype=dtype),
                           torch.empty(128, dtype=dtype), 1e-5),
)
