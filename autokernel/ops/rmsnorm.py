"""rmsnorm: y = x / sqrt(mean(x²) + eps) * weight over the last dimension of x[M, N].

Over a dim that is not the last, a shape (M, N, K) normalizes x[M, N, K] over dim 1 (weight [N]
along it; see `OpSpec.axis_dim`): an NCHW tensor's channels, as KernelBench's RMSNorm writes it.
"""

from __future__ import annotations

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
    axis_view,
    call_refusal,
    kernel_caller,
    only_tensor_argument,
    positional_arity,
    probe_close,
    probe_passes,
    probe_tensor,
    unverified_value,
    verified_over_an_axis,
)
from autokernel.integrate.plans import module_attribute
from autokernel.integrate.residual_norm import eps_attribute, handwritten_norm
from autokernel.ops.rowwise import (
    AXIS_CPU_EDGE_SHAPES,
    AXIS_CPU_SWEEP,
    AXIS_EDGE_SHAPES,
    AXIS_SWEEP,
    ROW_BENCH_SHAPES,
    ROW_CPU_EDGE_SHAPES,
    ROW_CPU_SWEEP,
    ROW_EDGE_SHAPES,
    ROW_SWEEP,
)
from autokernel.ops.spec import (
    AdversarialCase, AtenRule, Inputs, OpSpec, Shape, along_axis, element_size, rows_and_width,
    sample,
)
from autokernel.profiling.callsites import CAST_OPS, FINFO_EPS, Context, Extracted, SiteKey
from autokernel.profiling.site_readers import (
    arg_shape,
    arg_value,
    call_dtype,
    dims_over_axis,
    has_tensor,
    norm_width,
    shape_numel,
    single_axis,
)
from autokernel.profiling.events import ModuleInfo, OpCall
from autokernel.profiling.graph_norms import norm_pattern, norm_route
from autokernel.profiling.site_routes import MODULE, UNKNOWN, eps_mismatch

DIMS = ("M", "N")
DEFAULT_EPS = 1e-6


def stock_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = DEFAULT_EPS,
                  axis: int = -1) -> torch.Tensor:
    if axis % x.ndim == x.ndim - 1:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    # F.rms_norm normalizes trailing dims only; over another dim, stock PyTorch is the formula.
    rstd = torch.rsqrt(x.float().pow(2).mean(dim=axis, keepdim=True) + eps)
    gain = weight.reshape(weight.shape + (1,) * (x.ndim - 1 - axis % x.ndim))
    return (x * rstd).to(x.dtype) * gain


def _with_weight(
    x: torch.Tensor, dtype: torch.dtype, generator: torch.Generator, eps: float
) -> Inputs:
    # Trained-looking gains around 1, random (all-ones would hide a kernel that skips them).
    weight = 1.0 + 0.25 * sample((x.shape[-1],), torch.float32, x.device, generator, "normal")
    return (x.to(dtype), weight.to(dtype), eps)


def _row_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
    eps: float = DEFAULT_EPS,
) -> Inputs:
    # The output is normalized whatever x's scale; 1e3 keeps 7-sigma draws inside fp16's range
    # while x² (1e6) overflows fp16, so "large" also checks the float32 upcast.
    x = sample(shape, torch.float32, device, generator, distribution, large_scale=1e3)
    return _with_weight(x, dtype, generator, eps)


make_inputs = along_axis(_row_inputs)


def flops(shape: Shape) -> float:
    # 4 per element: square and add to the row sum, scale by 1/rms, multiply by weight.
    # Per-row divisions and the rsqrt are ignored.
    m, n = rows_and_width(shape)
    return 4.0 * m * n


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    m, n = rows_and_width(shape)
    return (2.0 * m * n + n) * element_size(dtype)  # x and weight read; y written


def _near_zero_rows(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", eps: float = DEFAULT_EPS,
) -> Inputs:
    m, _ = shape
    x = 1.0e-4 * sample(shape, torch.float32, device, generator, "normal")
    x[::3] = 0.0  # exactly-zero rows: the answer is 0, not NaN
    return _with_weight(x, dtype, generator, eps)


def _huge_magnitudes(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", eps: float = DEFAULT_EPS,
) -> Inputs:
    x = 6.0e4 * sample(shape, torch.float32, device, generator, "uniform")  # fp16 max is 65504
    return _with_weight(x, dtype, generator, eps)


def _mixed_row_scales(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", eps: float = DEFAULT_EPS,
) -> Inputs:
    m, _ = shape
    exponent = torch.randint(-4, 5, (m, 1), generator=generator, device=device)
    x = torch.pow(10.0, exponent) * sample(shape, torch.float32, device, generator, "uniform")
    return _with_weight(x, dtype, generator, eps)


def _spike_rows(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", eps: float = DEFAULT_EPS,
) -> Inputs:
    m, n = shape
    x = 1.0e-2 * sample(shape, torch.float32, device, generator, "normal")
    spike = torch.randint(0, n, (m,), generator=generator, device=device)
    x[torch.arange(m, device=device), spike] = 6.0e4
    return _with_weight(x, dtype, generator, eps)


ADVERSARIAL = (
    AdversarialCase(
        "near_zero_rows",
        "rows of 1e-4·N(0, 1) (mean x² ≈ 1e-8 ≪ eps) and exactly-zero rows: eps must sit inside "
        "the sqrt, and zero rows must give 0, not NaN",
        along_axis(_near_zero_rows),
    ),
    AdversarialCase(
        "huge_magnitudes",
        "uniform in ±6e4 (near fp16 max): x² overflows fp16 unless squared in fp32",
        along_axis(_huge_magnitudes),
    ),
    AdversarialCase(
        "mixed_row_scales",
        "each row scaled by its own 10^k, k in -4..4: per-row statistics must not leak",
        along_axis(_mixed_row_scales),
    ),
    AdversarialCase(
        "spike_rows",
        "one 6e4 entry per row among 1e-2 noise: the row's rms is the spike's, the rest ≈ 0",
        along_axis(_spike_rows),
    ),
)


def liger_rmsnorm() -> Callable[..., torch.Tensor] | None:
    """Liger's RMSNorm (llama casting: normalised in float32, rounded, then scaled by weight)."""
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except ImportError:
        return None

    def run(x: torch.Tensor, weight: torch.Tensor, eps: float = DEFAULT_EPS,
            axis: int = -1) -> torch.Tensor:
        if axis % x.ndim == x.ndim - 1:
            return LigerRMSNormFunction.apply(x, weight, eps)
        # Liger normalizes the last dim: move the axis there and back (two copies it pays for).
        moved = x.movedim(axis, -1).contiguous()
        return LigerRMSNormFunction.apply(moved, weight, eps).movedim(-1, axis)

    return run


def _rmsnorm_shape(op: OpCall, ctx: Context) -> Extracted:
    x, n = arg_shape(op, 0), norm_width(op)
    if not x or not n:
        return None
    eps = arg_value(op, 3)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        eps = ctx.module_eps(op)
    if eps is None:  # F.rms_norm's default
        eps = FINFO_EPS.get(call_dtype(op, ctx.record.dtype))
    params: dict[str, Any] = {"eps": eps} if eps is not None else {}
    if not has_tensor(op, 2):
        params["elementwise_affine"] = False
    return {"M": shape_numel(x) // n, "N": n}, params


def _is_square(op: OpCall) -> bool:
    if op.name == "aten::pow":
        return arg_value(op, 1) == 2
    if op.name == "aten::square":
        return True
    return op.name == "aten::mul" and len(op.shapes) >= 2 and op.shapes[0] == op.shapes[1]


RMSNORM_OPS = frozenset({
    "aten::pow", "aten::square", "aten::mean", "aten::add", "aten::add_", "aten::rsqrt",
    "aten::sqrt", "aten::div", "aten::reciprocal", "aten::mul", "aten::mul_",
}) | CAST_OPS


def _has_submodules(ctx: Context, path: str) -> bool:
    prefix = f"{path}." if path else ""
    return any(other != path and other.startswith(prefix) for other in ctx.record.modules)


def _find_handwritten_rmsnorm(ctx: Context) -> None:
    """A module of pow/mean/add/rsqrt-or-sqrt/div-or-mul with one 1-D weight as wide as the
    normalized dim, or with no parameters at all, over any one dim (KernelBench's RMSNorm over
    NCHW channels)."""
    for scope, ops in ctx.in_scope.items():
        call = ctx.record.module_calls.get(scope)
        info = ctx.record.modules.get(call.path) if call else None
        if info is None or len(info.params) > 1:
            continue
        weight_shape: list[int] | None = None
        if info.params:
            (weight_name, weight_shape), = info.params.items()
            if len(weight_shape) != 1 or "bias" in weight_name:
                continue
        elif _has_submodules(ctx, call.path):
            continue  # a model of several norms, each a module of its own
        work = [op for op in ops if ctx.significant(op)]
        if not work or any(op.id in ctx.claims for op in ops):
            continue
        names = {op.name for op in work}
        if not names <= RMSNORM_OPS:
            continue  # a subtraction, a variance, anything else: not an RMSNorm
        if "aten::mean" not in names or not names & {"aten::rsqrt", "aten::sqrt",
                                                       "aten::reciprocal"}:
            continue
        if not any(_is_square(op) for op in work) or \
                sum(op.name == "aten::mean" for op in work) != 1:
            continue
        mean = next(op for op in work if op.name == "aten::mean")
        x = arg_shape(mean, 0)
        if not x:
            continue
        dim = arg_value(mean, 1)
        axis = len(x) - 1 if dim is None else single_axis(dim, len(x))  # None: not recorded
        # A weight spans the normalized dim, at any axis (a [C] gain viewed as [1, C, 1, 1]).
        if axis is None or (weight_shape is not None and x[axis] != weight_shape[0]):
            continue
        named, params = dims_over_axis(x, axis)
        if weight_shape is None:
            params["elementwise_affine"] = False
        eps = ctx.module_eps(mean)
        if eps is None:
            add = next((op for op in work if op.name in ("aten::add", "aten::add_")), None)
            scalar = arg_value(add, 1) if add else None
            if isinstance(scalar, float):
                eps = scalar
        if eps is not None:
            params["eps"] = eps
        label = "rmsnorm(" + ", ".join(sorted(names - CAST_OPS)) + ")"
        site = ctx.site("rmsnorm", call.path, label, named, params,
                        call_dtype(work[0], ctx.record.dtype))
        ctx.claim(ops, "rmsnorm", ("rmsnorm-module", scope), site)


RMSNORM_MODULE = "torch.nn.modules.normalization.RMSNorm"  # a ModuleInfo's type


def _site_route(site: SiteKey, module_type: str | None, modules: Mapping[str, ModuleInfo]) -> str:
    """nn.RMSNorm and a hand-written RMSNorm module (the pattern above) are routed as modules
    (the latter after a probe); F.rms_norm elsewhere is not."""
    norm = dict(site.notes).get("norm")
    if norm is not None:  # found in the data-flow graph
        why = norm_route("rmsnorm")(site)
        if why:
            return why
        return MODULE if norm == "module" else "no: F.rms_norm outside nn.RMSNorm"
    if site.aten_op.startswith("rmsnorm(") or module_type == RMSNORM_MODULE:
        return MODULE
    return UNKNOWN if module_type is None else "no: F.rms_norm outside nn.RMSNorm"


SPEC = OpSpec(
    name="rmsnorm",
    dims=DIMS,
    reference=reference.rmsnorm,
    stock=stock_rmsnorm,
    liger=liger_rmsnorm,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=False,
    smoke_shape=(4, 37),
    sweep=ROW_SWEEP + ((8192, 2048), (2048, 16384), AXIS_SWEEP[0]),
    cpu_sweep=ROW_CPU_SWEEP + AXIS_CPU_SWEEP,
    edge_shapes=ROW_EDGE_SHAPES + ((1, 65537),) + AXIS_EDGE_SHAPES,
    cpu_edge_shapes=ROW_CPU_EDGE_SHAPES + AXIS_CPU_EDGE_SHAPES,
    bench_shapes=ROW_BENCH_SHAPES,
    adversarial=ADVERSARIAL,
    aten_ops={name: AtenRule(_rmsnorm_shape)
              for name in ("aten::rms_norm", "aten::_fused_rms_norm")},
    patterns=(_find_handwritten_rmsnorm,),
    graph_patterns=(norm_pattern("rmsnorm"),),
    site_route=_site_route,
    param_mismatch=eps_mismatch,
    axis_dim="K",
    notes="rmsnorm over the last dim (or over dim 1 of x[M, N, K]), x·rsqrt(mean(x²) + eps)·weight "
    "(eps 1e-6 unless the model says otherwise); FLOPs = 4·M·N·K; bytes = read x, weight + write "
    "y.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


def _weightless_rmsnorm(module: nn.Module, kernel: RoutedKernel) -> dict[str, Any] | None:
    """A module with no parameters, no children, forward(x) and an eps attribute (KernelBench's
    RMSNorm: x / sqrt(mean(x², dim=1) + eps)), probed over the dim the kernel was verified over."""
    if any(True for _ in module.parameters()) or any(True for _ in module.children()):
        return None
    name = eps_attribute(module)
    if name is None or positional_arity(module) != 1:
        return None
    axis = int(kernel.params["axis"]) if verified_over_an_axis(kernel) else -1
    return {"eps_attribute": name, "axis": axis}


def _computes_weightless_rmsnorm(module: nn.Module, kernel: RoutedKernel,
                                 details: dict[str, Any]) -> bool:
    axis = details["axis"]
    # The normalized dim (8 wide) at `axis`, with dims before and after it (NCHW at axis 1), or
    # last of four: a probe of two dims would not tell dim 1 from the last.
    shape = (2, 3, 2, 8) if axis == -1 else (2,) * axis + (8, 3, 2)
    x = probe_tensor(shape, torch.ones((), dtype=torch.float32, device=kernel.op.device_type))
    eps = getattr(module, details["eps_attribute"])
    ones = torch.ones(8, dtype=x.dtype, device=x.device)
    return probe_close(kernel, module.forward(x), kernel.reference(x, ones, float(eps), axis))


def _computes_rmsnorm(module: nn.Module, kernel: RoutedKernel, details: dict[str, Any]) -> bool:
    """Does the module's own forward compute x·rsqrt(mean(x²) + eps)·weight on random inputs,
    over the last dim or over `details["axis"]` (weight [C] along it, NCHW channels at 1)?"""
    weight = module.weight
    axis = details.get("axis", -1)
    width = weight.shape[0]
    x = probe_tensor((3, width) if axis == -1 else (2,) * axis + (width, 3, 2), weight)
    eps = getattr(module, details["eps_attribute"])
    return probe_close(kernel, module.forward(x), kernel.reference(x, weight, float(eps), axis))


def _recognize_rmsnorm(module: nn.Module, kernel: RoutedKernel) -> dict[str, Any] | str | None:
    """nn.RMSNorm, and a hand-written RMSNorm module that passes the probe (a Gemma-style
    (1 + weight) norm does not). nn.LayerNorm is layernorm's, even without a bias."""
    rms_norm_class = getattr(nn, "RMSNorm", None)
    if rms_norm_class is not None and isinstance(module, rms_norm_class):
        if len(module.normalized_shape) != 1:
            return "normalizes over more than the last dim"
        return {"eps_attribute": "eps"}
    if isinstance(module, nn.LayerNorm):
        return None
    details = handwritten_norm(module)
    if details is None:
        weightless = _weightless_rmsnorm(module, kernel)
        if weightless is None:
            return None
        if probe_passes(lambda: _computes_weightless_rmsnorm(module, kernel, weightless)):
            return weightless
        where = "the last dim" if weightless["axis"] == -1 else f"dim {weightless['axis']}"
        return f"probe: does not compute x·rsqrt(mean(x²) + eps) over {where}"
    if probe_passes(lambda: _computes_rmsnorm(module, kernel, details)):
        return details
    if not verified_over_an_axis(kernel):
        return "probe: does not compute x·rsqrt(mean(x²) + eps)·weight over the last dim"
    # A kernel verified over an axis also takes a weighted norm over that dim (a channel norm).
    axis = int(kernel.params["axis"])
    over_axis = {**details, "axis": axis}
    if probe_passes(lambda: _computes_rmsnorm(module, kernel, over_axis)):
        return over_axis
    return f"probe: does not compute x·rsqrt(mean(x²) + eps)·weight over the last dim or dim {axis}"


def _rmsnorm_inputs(route: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
                    ) -> tuple[Any, ...] | str:
    x = only_tensor_argument(args, kwargs)
    if x is None:
        return "arguments"
    module = route.module
    return x, module_attribute(module, "weight"), getattr(module, route.details["eps_attribute"])


def _plan_rmsnorm(route: Any, x: torch.Tensor, weight: torch.Tensor | None,
                  eps: float | None) -> Plan:
    """Over the last dim on x's rows (x itself when 2-D), or over the verified axis on the
    [outer, N, inner] view; a weightless norm with a constant gain of ones."""
    if x.ndim == 0:
        return "arguments"
    axis = route.details.get("axis", -1)
    if not -x.ndim <= axis < x.ndim:
        return "fewer dims than the verified axis"
    axis %= x.ndim
    width = x.shape[axis]
    gain = affine_or_constant(weight, route, "weight", width, x, 1.0)
    if gain.shape != (width,):
        return "shape"
    if eps is None:  # nn.RMSNorm's default
        eps = torch.finfo(x.dtype).eps
    why = call_refusal(route.kernel, x, gain) or unverified_value(route.kernel, "eps", eps)
    if why:
        return why
    call, eps = kernel_caller(route.kernel, x, gain), float(eps)
    ones = gain if weight is None else None
    shape = tuple(x.shape)
    if axis == x.ndim - 1 and x.ndim == 2:
        def run(x: torch.Tensor, weight: torch.Tensor | None, _eps: Any) -> Outcome:
            return call(x, weight if ones is None else ones, eps)
    elif axis == x.ndim - 1:
        def run(x: torch.Tensor, weight: torch.Tensor | None, _eps: Any) -> Outcome:
            out, why = call(x.reshape(-1, width), weight if ones is None else ones, eps)
            return (None, why) if why else (out.reshape(shape), None)
    else:
        def run(x: torch.Tensor, weight: torch.Tensor | None, _eps: Any) -> Outcome:
            out, why = call(axis_view(x, axis), weight if ones is None else ones, eps, 1)
            return (None, why) if why else (out.reshape(shape), None)
    return run


INTEGRATION = Integration(
    schema="(Tensor x, Tensor weight, float eps, int axis=-1) -> Tensor",
    fake=fake_like_first,
    backward="recompute",
    module_route=ModuleRoute(_recognize_rmsnorm, _rmsnorm_inputs, _plan_rmsnorm),
    example=lambda dtype: (torch.empty(64, 128, dtype=dtype), torch.empty(128, dtype=dtype), 1e-5),
)
