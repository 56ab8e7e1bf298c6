"""add_layernorm: h = x + residual; y = (h - mean) / sqrt(var + eps) * weight + bias over the
last dim of x[M, N], returning (y, h): the normed value and the updated residual stream, as a
post-norm block (BERT: `y = self.norm(x + attn(x))`) or a pre-norm one (GPT-2, ViT: `x = x +
attn(self.ln_1(x)); ... self.ln_2(x)`) computes it.

A fused kernel reads x and residual once and writes h and y, where PyTorch runs an add (read 2,
write 1) and then a norm (read 1, write 1). h is rounded to x's dtype before it is normalized,
as the unfused model stores it. The residual-add pattern (`profiling/residual_add.py`) claims an
aten::add followed by an nn.LayerNorm of its result as one call; verify defers the add inside the
target's modules into the nn.LayerNorm it feeds (`integrate/residual_norm.py`). F.layer_norm
outside an nn.LayerNorm is not routed, as for the layernorm type.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autokernel import reference
from autokernel.integrate.integration import CallRoute, FusedAddRoute, Integration, Plan
from autokernel.integrate.routing import RoutedKernel
from autokernel.integrate.plans import module_attribute
from autokernel.integrate.residual_norm import (
    ADD_FUNCTIONS, FusedNormTap, PendingSum, defer_add, fake_two_like_first, fused_norm_plan,
)
from autokernel.ops.layernorm import LAYERNORM_MODULE, SPEC as LAYERNORM, _affine
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
from autokernel.profiling.graph_norms import add_norm_pattern
from autokernel.profiling.residual_add import NormAfterAdd, residual_add_pattern
from autokernel.profiling.site_routes import eps_mismatch

DIMS = ("M", "N")
DEFAULT_EPS = 1e-5


def add_layernorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  bias: torch.Tensor, eps: float = DEFAULT_EPS
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, h): h = x + residual summed in float32 (float64 for float64 inputs) and returned in
    x's dtype; y = the layer norm of h as returned (rounded to x's dtype, as the unfused model
    normalizes it), computed in float32 by the layernorm reference, returned in x's dtype."""
    h = rounded_sum(x, residual)
    return reference.layernorm(h, weight, bias, eps), h


def stock_add_layernorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                        bias: torch.Tensor, eps: float = DEFAULT_EPS
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    h = x + residual
    return F.layer_norm(h, (h.shape[-1],), weight, bias, eps), h


def _with_affine(x: torch.Tensor, residual: torch.Tensor, dtype: torch.dtype,
                 generator: torch.Generator, eps: float) -> Inputs:
    weight, bias = _affine(x.shape[-1], dtype, x.device, generator)
    return (x.to(dtype), residual.to(dtype), weight, bias, eps)


make_inputs = residual_input_maker(residual_pair, _with_affine, DEFAULT_EPS)


def flops(shape: Shape) -> float:
    # 8 per element: the add, then layernorm's 7 (see ops/layernorm.py).
    m, n = rows_and_width(shape)
    return 8.0 * m * n


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    m, n = rows_and_width(shape)
    return (4.0 * m * n + 2.0 * n) * element_size(dtype)  # x, residual, weight, bias; h, y


def _large_mean_pair(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                     generator: torch.Generator, distribution: str
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    # The stream sits at 1e4 with a spread of 4: mean(h²) - mean(h)² subtracts two numbers near
    # 1e8 whose float32 difference is mostly noise. residual and h are drawn in dtype and x is
    # their difference, exact in dtype (both near 1e4: Sterbenz), so x + residual IS h in every
    # dtype and no rounding of the sum (8 apart at 1e4 in fp16) blurs the rows' statistics.
    def near_level() -> torch.Tensor:
        return (1.0e4 + 4.0 * sample(shape, torch.float32, device, generator)).to(dtype).float()

    residual, h = near_level(), near_level()
    return h - residual, residual


ADVERSARIAL = (
    AdversarialCase(
        "large_mean_rows",
        "h = x + residual = 1e4 + N(0, 4²), exact in dtype: a one-pass E[h²] - E[h]² variance "
        "cancels catastrophically in float32; the mean must come first",
        residual_input_maker(_large_mean_pair, _with_affine, DEFAULT_EPS),
    ),
    AdversarialCase(
        "cancelling_rows",
        "x = -residual, plus 1e-4 noise on every third row: h exactly zero (y must be the bias, "
        "not NaN) or tiny (variance ≪ eps, so eps must sit inside the sqrt); normalizing x or "
        "the residual alone is far off",
        residual_input_maker(cancelling_pair, _with_affine, DEFAULT_EPS),
    ),
    AdversarialCase(
        "large_residual",
        "x and residual uniform in ±3e4: h up to 6e4 (near fp16 max), its squares overflow "
        "fp16 unless the add and the statistics are done in float32",
        residual_input_maker(large_residual_pair, _with_affine, DEFAULT_EPS),
    ),
    AdversarialCase(
        "mixed_row_scales",
        "each row scaled by its own 10^k, k in -4..3: per-row statistics must not leak",
        residual_input_maker(mixed_scale_pair, _with_affine, DEFAULT_EPS),
    ),
)


# The norm the add feeds: the layernorm type's ops, called by nn.LayerNorm or as F.layer_norm.
NORM = NormAfterAdd("layernorm", tuple(LAYERNORM.aten_ops), LAYERNORM_MODULE, "F.layer_norm")


SPEC = OpSpec(
    name="add_layernorm",
    dims=DIMS,
    reference=add_layernorm,
    stock=stock_add_layernorm,
    liger=None,  # Liger has fused add + RMSNorm, not add + LayerNorm
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
    patterns=(residual_add_pattern("add_layernorm", NORM),),
    graph_patterns=(add_norm_pattern("add_layernorm", "layernorm"),),
    site_route=NORM.site_route,
    param_mismatch=eps_mismatch,
    outputs=2,
    notes="add_layernorm over the last dim: h = x + residual, y = layer_norm(h)·weight + bias "
    "(biased variance, eps 1e-5 unless the model says otherwise), returning (y, h); FLOPs = "
    "8·M·N; bytes = read x, residual, weight, bias + write y, h.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


def _add_layernorm_recompute(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                             bias: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward's differentiable path: the unfused model's add and norm, in float32."""
    h = x + residual
    y = torch.nn.functional.layer_norm(h.float(), (h.shape[-1],), weight.float(), bias.float(),
                                       eps)
    return y.to(x.dtype), h


def _recognize_layernorm(module: nn.Module, kernel: RoutedKernel) -> dict[str, Any] | str | None:
    """nn.LayerNorm over the last dim (with or without weight and bias); details name its width
    (the adds worth deferring). Hand-written LayerNorms are not taken, as by the layernorm type."""
    if not isinstance(module, nn.LayerNorm):
        return None
    if len(module.normalized_shape) != 1:
        return "normalizes over more than the last dim"
    return {"width": int(module.normalized_shape[0])}


def _fused_layernorm_inputs(tap: FusedNormTap, pending: PendingSum) -> tuple[Any, ...]:
    x, residual = pending.operands
    module = tap.module
    return (x, residual, module.eps, module_attribute(module, "weight"),
            module_attribute(module, "bias"))


def _plan_fused_layernorm(tap: FusedNormTap, x: torch.Tensor, residual: torch.Tensor,
                          eps: float, weight: torch.Tensor | None,
                          bias: torch.Tensor | None) -> Plan:
    return fused_norm_plan(tap, x, residual, eps, (weight, 1.0), (bias, 0.0))


INTEGRATION = Integration(
    schema="(Tensor x, Tensor residual, Tensor weight, Tensor bias, float eps) -> "
    "(Tensor, Tensor)",
    fake=fake_two_like_first,
    backward="recompute",
    recompute=_add_layernorm_recompute,
    call_routes={"": (CallRoute(ADD_FUNCTIONS, defer_add),)},
    fused_add=FusedAddRoute(_recognize_layernorm, _fused_layernorm_inputs,
                            _plan_fused_layernorm),
    example=lambda dtype: (torch.empty(64, 128, dtype=dtype), torch.empty(64, 128, dtype=dtype),
                           torch.empty(128, dtype=dtype), torch.empty(128, dtype=dtype), 1e-5),
)
