"""layernorm: y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim of x[M, N]."""

from __future__ import annotations

import math

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autokernel import reference
from autokernel.integrate.custom_ops import fake_like_first
from autokernel.integrate.integration import Integration, ModuleRoute, Plan
from autokernel.integrate.routing import Outcome, RoutedKernel
from autokernel.integrate.route_helpers import (
    affine_or_constant,
    call_refusal,
    kernel_caller,
    only_tensor_argument,
    unverified_value,
)
from autokernel.integrate.plans import module_attribute
from autokernel.ops.rowwise import (
    ROW_BENCH_SHAPES,
    ROW_CPU_EDGE_SHAPES,
    ROW_CPU_SWEEP,
    ROW_EDGE_SHAPES,
    ROW_SWEEP,
)
from autokernel.ops.spec import (
    AdversarialCase, AtenRule, Inputs, OpSpec, Shape, element_size, sample,
)
from autokernel.profiling.callsites import Context, Extracted, SiteKey
from autokernel.profiling.site_readers import (
    arg_shape,
    arg_value,
    has_tensor,
    norm_width,
    shape_numel,
)
from autokernel.profiling.events import ModuleInfo, OpCall
from autokernel.profiling.graph_norms import norm_pattern, norm_route
from autokernel.profiling.site_routes import MODULE, UNKNOWN, eps_mismatch

DIMS = ("M", "N")
DEFAULT_EPS = 1e-5


def stock_layernorm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = DEFAULT_EPS
) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _affine(
    n: int, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    # Trained-looking parameters: weight around 1, bias around 0, both random (never all-ones or
    # all-zeros, which would hide a kernel that skips them).
    weight = 1.0 + 0.25 * sample((n,), torch.float32, device, generator, "normal")
    bias = 0.25 * sample((n,), torch.float32, device, generator, "normal")
    return weight.to(dtype), bias.to(dtype)


def _with_affine(
    x: torch.Tensor, dtype: torch.dtype, generator: torch.Generator, eps: float
) -> Inputs:
    weight, bias = _affine(x.shape[-1], dtype, x.device, generator)
    return (x.to(dtype), weight, bias, eps)


def make_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
    eps: float = DEFAULT_EPS,
) -> Inputs:
    # The output is normalized whatever x's scale; 1e3 keeps 7-sigma draws inside fp16's range.
    x = sample(shape, torch.float32, device, generator, distribution, large_scale=1e3)
    return _with_affine(x, dtype, generator, eps)


def flops(shape: Shape) -> float:
    # 7 per element: add to the sum, subtract the mean, square and add to the variance sum,
    # scale by 1/std, multiply by weight, add bias. Per-row divisions and the rsqrt are ignored.
    m, n = shape
    return 7.0 * m * n


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    m, n = shape
    return (2.0 * m * n + 2.0 * n) * element_size(dtype)  # x, weight, bias read; y written


def _large_mean_small_variance(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", eps: float = DEFAULT_EPS,
) -> Inputs:
    x = 1.0e4 + sample(shape, torch.float32, device, generator, "normal")
    return _with_affine(x, dtype, generator, eps)


def _constant_rows(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", eps: float = DEFAULT_EPS,
) -> Inputs:
    m, n = shape
    level = 10.0 * sample((m, 1), torch.float32, device, generator, "normal")
    return _with_affine(level.expand(m, n).contiguous(), dtype, generator, eps)


def _near_constant_rows(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", eps: float = DEFAULT_EPS,
) -> Inputs:
    m, _ = shape
    level = sample((m, 1), torch.float32, device, generator, "normal")
    x = level + 1.0e-3 * sample(shape, torch.float32, device, generator, "normal")
    return _with_affine(x, dtype, generator, eps)


def _huge_magnitudes(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", eps: float = DEFAULT_EPS,
) -> Inputs:
    x = 6.0e4 * sample(shape, torch.float32, device, generator, "uniform")  # fp16 max is 65504
    return _with_affine(x, dtype, generator, eps)


def _mixed_rows(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", eps: float = DEFAULT_EPS,
) -> Inputs:
    m, _ = shape
    offset = 1.0e4 * sample((m, 1), torch.float32, device, generator, "uniform")
    exponent = torch.randint(-3, 3, (m, 1), generator=generator, device=device)
    x = offset + torch.pow(10.0, exponent) * sample(shape, torch.float32, device, generator)
    return _with_affine(x, dtype, generator, eps)


ADVERSARIAL = (
    AdversarialCase(
        "large_mean_small_variance",
        "x = 1e4 + N(0, 1): a one-pass E[x²] - E[x]² variance cancels catastrophically in fp32",
        _large_mean_small_variance,
    ),
    AdversarialCase(
        "constant_rows",
        "every row constant (variance exactly 0): the answer is the bias; any rounding error in "
        "the mean is amplified by 1/sqrt(eps) ≈ 316",
        _constant_rows,
    ),
    AdversarialCase(
        "near_constant_rows",
        "rows of a constant plus 1e-3 noise: variance below eps, so eps must sit inside the sqrt",
        _near_constant_rows,
    ),
    AdversarialCase(
        "huge_magnitudes",
        "uniform in ±6e4 (near fp16 max): squares overflow unless accumulated in fp32",
        _huge_magnitudes,
    ),
    AdversarialCase(
        "mixed_rows",
        "each row its own offset (±1e4) and scale (1e-3..1e2): per-row statistics must not leak",
        _mixed_rows,
    ),
)


def liger_layernorm() -> Callable[..., torch.Tensor] | None:
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    except ImportError:
        return None

    def run(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
            eps: float = DEFAULT_EPS) -> torch.Tensor:
        return LigerLayerNormFunction.apply(x, weight, bias, eps)

    return run


def _layernorm_shape(op: OpCall, ctx: Context) -> Extracted:
    x, n = arg_shape(op, 0), norm_width(op)
    if not x or not n:
        return None
    params: dict[str, Any] = {}
    eps = arg_value(op, 4)
    if isinstance(eps, (int, float)) and not isinstance(eps, bool):
        params["eps"] = eps
    # Names the reference's arguments do not use, so these stay notes.
    params["elementwise_affine"] = has_tensor(op, 2)
    params["with_bias"] = has_tensor(op, 3)
    return {"M": shape_numel(x) // n, "N": n}, params


LAYERNORM_MODULE = "torch.nn.modules.normalization.LayerNorm"  # a ModuleInfo's type


def _site_route(site: SiteKey, module_type: str | None, modules: Mapping[str, ModuleInfo]) -> str:
    """nn.LayerNorm is routed as a module; F.layer_norm elsewhere is not, nor a LayerNorm
    written out (verify's module route takes nn.LayerNorm only)."""
    norm = dict(site.notes).get("norm")
    if norm is not None and site.aten_op != "aten::layer_norm":  # written out, in the graph
        return norm_route("layernorm")(site) or "no: written out (only nn.LayerNorm is routed)"
    if module_type is None:
        return UNKNOWN
    return MODULE if module_type == LAYERNORM_MODULE else "no: F.layer_norm outside nn.LayerNorm"


SPEC = OpSpec(
    name="layernorm",
    dims=DIMS,
    reference=reference.layernorm,
    stock=stock_layernorm,
    liger=liger_layernorm,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=False,
    smoke_shape=(4, 37),
    sweep=ROW_SWEEP + ((8192, 2048), (2048, 16384),),
    cpu_sweep=ROW_CPU_SWEEP,
    edge_shapes=ROW_EDGE_SHAPES + ((1, 65537),),
    cpu_edge_shapes=ROW_CPU_EDGE_SHAPES,
    bench_shapes=ROW_BENCH_SHAPES,
    adversarial=ADVERSARIAL,
    aten_ops={name: AtenRule(_layernorm_shape)
              for name in ("aten::layer_norm", "aten::native_layer_norm")},
    graph_patterns=(norm_pattern("layernorm"),),
    site_route=_site_route,
    param_mismatch=eps_mismatch,
    notes="layernorm over the last dim with affine weight and bias (eps 1e-5 unless the model "
    "says otherwise); FLOPs = 7·M·N; bytes = read x, weight, bias + write y.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


def _recognize_layernorm(module: nn.Module, kernel: RoutedKernel) -> dict[str, Any] | str | None:
    """nn.LayerNorm, over its last dim or over several (KernelBench's LayerNorm over (C, H, W)):
    the profiler's rows are then the flattened normalized dims, which the kernel normalizes as
    one row with the flattened weight and bias, the same numbers."""
    if not isinstance(module, nn.LayerNorm):
        return None
    return {}


def _layernorm_inputs(route: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
                      ) -> tuple[Any, ...] | str:
    x = only_tensor_argument(args, kwargs)
    if x is None:
        return "arguments"
    module = route.module
    return (x, module_attribute(module, "weight"), module_attribute(module, "bias"), module.eps,
            tuple(module.normalized_shape))


def _plan_layernorm(route: Any, x: torch.Tensor, weight: torch.Tensor | None,
                    bias: torch.Tensor | None, eps: float, normalized: tuple[int, ...]) -> Plan:
    """On x's rows (x itself when 2-D) over the flattened normalized dims, with the flattened
    weight and bias (constants of ones and zeros for a module without them)."""
    if x.ndim == 0:
        return "arguments"
    if x.ndim < len(normalized) or tuple(x.shape[x.ndim - len(normalized):]) != normalized:
        return "shape"
    width = math.prod(normalized)
    flat = len(normalized) != 1  # weight and bias [*normalized], passed as [width]
    weight_rows = weight.reshape(width) if weight is not None and flat else weight
    bias_rows = bias.reshape(width) if bias is not None and flat else bias
    ones = affine_or_constant(weight_rows, route, "weight", width, x, 1.0)
    zeros = affine_or_constant(bias_rows, route, "bias", width, x, 0.0)
    why = call_refusal(route.kernel, x, ones, zeros) or unverified_value(route.kernel, "eps", eps)
    if why:
        return why
    call, eps = kernel_caller(route.kernel, x, ones, zeros), float(eps)
    constant_weight, constant_bias = weight is None, bias is None
    shape, rows = tuple(x.shape), x.ndim != 2 or x.shape[1] != width

    def run(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
            *_: Any) -> Outcome:
        if constant_weight:
            weight = ones
        elif flat:
            weight = weight.reshape(width)  # type: ignore[union-attr]
        if constant_bias:
            bias = zeros
        elif flat:
            bias = bias.reshape(width)  # type: ignore[union-attr]
        if not rows:
            return call(x, weight, bias, eps)
        out, why = call(x.reshape(-1, width), weight, bias, eps)
        return (None, why) if why else (out.reshape(shape), None)

    return run


INTEGRATION = Integration(
    schema="(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor",
    fake=fake_like_first,
    backward="recompute",
    module_route=ModuleRoute(_recognize_layernorm, _layernorm_inputs, _plan_layernorm),
    example=lambda dtype: (*(torch.empty(s, dtype=dtype) for s in ((64, 128), 128, 128)), 1e-5),
)
