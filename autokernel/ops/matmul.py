"""matmul: C[M, N] = A[M, K] @ B[K, N], batched: C[b] = A[b] @ B[b]. Shapes are B x M x N x K.

One kernel type for every GEMM a model runs: linear layers (B = 1), other 2-D products, and
batched ones (torch.bmm, attention's Q @ Kᵀ and P @ V, B = their batch x heads). At B = 1 the
operands are 2-D, A[M, K] and B[K, N], as a routed nn.Linear hands them over; at B > 1 they are
3-D, A[B, M, K] and B[B, K, N]. `b_transposed=True` makes B the transposed view of a contiguous
[.., N, K] tensor, the layout of Kᵀ in attention scores and of a weight used as x @ Wᵀ.

Inputs are scaled like a linear layer's: A is the activation (unit scale), B the weight divided
by sqrt(K) (its fan-in, as nn.Linear's init does), so C stays O(1) at every K. That keeps the
fp32 tolerance at the default 1e-4: a correct fp32 accumulation over K terms of size 1/sqrt(K)
has an absolute error of about 2^-24 * sqrt(K), far below 1e-4 even at K = 16384, so no
K-dependent relaxation is needed. (Unscaled inputs would make |C| ~ sqrt(K) and push elements
that nearly cancel past any fixed atol, for cuBLAS as much as for a candidate.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from autokernel import reference
from autokernel.integrate.attention_chain import NOT_MINE
from autokernel.integrate.custom_ops import saved_inputs
from autokernel.integrate.integration import CallRoute, Integration, ModuleRoute, Plan
from autokernel.integrate.routing import Outcome, RoutedKernel, RouteStats
from autokernel.integrate.route_helpers import (
    REQUIRED,
    bind_arguments,
    call_refusal,
    kernel_caller,
    only_tensor_argument,
    plain_linear,
)
from autokernel.integrate.plans import argument_getter, argument_runner, module_attribute
from autokernel.ops.spec import (
    DEFAULT_TOLERANCES,
    AdversarialCase,
    AtenRule,
    Inputs,
    OpSpec,
    Shape,
    element_size,
    sample,
)
from autokernel.profiling.callsites import Context, Extracted, SiteKey
from autokernel.profiling.site_readers import (
    arg_shape,
    arg_value,
    broadcast_numel,
    has_tensor,
    shape_numel,
)
from autokernel.profiling.events import ModuleInfo, OpCall
from autokernel.profiling.site_routes import CALL, LINEAR_TYPES, MODULE, UNKNOWN

# "large" multiplies the activation A by this (B keeps its fan-in scale), so |C| ~ 32 and up to
# ~200 in fp16/bf16. fp32 gets a smaller scale: a correct fp32 accumulation carries about
# |C| * 2^-24 * sqrt(K) absolute error, and at |C| ~ 32, K >= 4096 that is ~1.2e-4, past
# atol=1e-4 on the elements that nearly cancel. Seen on an H200 (ieee dots, 4096^3: 74 of 16.7M
# elements off by ~1.5e-4); the CPU interpreter's numpy dot sums more accurately and hid it.
LARGE_SCALE = 32.0
FP32_LARGE_SCALE = 4.0


def _operands(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str,
    b_transposed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A[(B,) M, K] and B[(B,) K, N] drawn in float32 (B scaled by 1/sqrt(K)), cast to `dtype`;
    2-D at B = 1. With `b_transposed`, B is drawn as [(B,) N, K] and handed over transposed."""
    batch, m, n, k = shape
    lead = () if batch == 1 else (batch,)
    scale = FP32_LARGE_SCALE if dtype == torch.float32 else LARGE_SCALE
    a = sample((*lead, m, k), torch.float32, device, generator, distribution, large_scale=scale)
    if b_transposed:
        b = sample((*lead, n, k), torch.float32, device, generator, distribution,
                   large_scale=1.0)
        return a.to(dtype), (b / math.sqrt(k)).to(dtype).transpose(-1, -2)
    b = sample((*lead, k, n), torch.float32, device, generator, distribution, large_scale=1.0)
    return a.to(dtype), (b / math.sqrt(k)).to(dtype)


def make_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
    b_transposed: bool = False,
    **params: Any,
) -> Inputs:
    if params:
        raise ValueError(f"matmul takes b_transposed only; got {', '.join(sorted(params))}")
    return _operands(shape, dtype, device, generator, distribution, bool(b_transposed))


def _wide_dynamic_range(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    a, b = _operands(shape, torch.float32, device, generator, "normal")
    # Rows span 1e-3..1e2 (1e-3..FP32_LARGE_SCALE in fp32, for the reason given there).
    top = FP32_LARGE_SCALE if dtype == torch.float32 else 100.0
    row_scale = torch.logspace(-3, math.log10(top), shape[1], device=device, dtype=torch.float32)
    return (a * row_scale[:, None]).to(dtype), b.to(dtype)


def _k_equals_one(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    batch, m, n, _ = shape
    return _operands((batch, m, n, 1), dtype, device, generator, "normal")


def _tall_skinny(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    batch, m, _, k = shape
    return _operands((batch, 4 * m, 3, k), dtype, device, generator, "normal")


def _common_offset(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    a, b = _operands(shape, torch.float32, device, generator, "normal")
    # Every column of B sums to ~0, so offset * colsum(B) cancels and C stays O(1) while the
    # running partial sums reach ~offset: fp16/bf16 accumulation is off by 10-100x the
    # tolerance at 32. fp32 uses FP32_LARGE_SCALE, for the reason given there (an H200 at
    # 4096^3 put 2110 elements of a correct ieee kernel past 1e-4 at 32); a tf32 or
    # half-precision shortcut still misses by ~20x there.
    offset = FP32_LARGE_SCALE if dtype == torch.float32 else 32.0
    b = b - b.mean(dim=-2, keepdim=True)
    return (a + offset).to(dtype), b.to(dtype)


def _transposed_b(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    # x @ weight.t() and q @ k.transpose(-2, -1): B arrives as a column-major view.
    return _operands(shape, dtype, device, generator, "normal", b_transposed=True)


def _views_of_fused_projections(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    batch, m, n, k = shape
    heads = next((h for h in range(2, batch + 1) if batch % h == 0), 1)
    outer = batch // heads
    # Attention's q @ kᵀ on q, k cut out of one qkv projection [outer, S, 3 * heads * D] and
    # split into heads: A[outer, heads, M, K] and B[outer, heads, K, N] whose batch dims do not
    # merge (stride(outer) != heads * stride(heads)), rows 3 * heads * K apart, B transposed.
    # Cast before slicing: .to() of a view that is not dense makes a contiguous copy.
    q = sample((outer, m, 3 * heads * k), dtype, device, generator, "normal")
    kv = (sample((outer, n, 3 * heads * k), torch.float32, device, generator, "normal")
          / math.sqrt(k)).to(dtype)
    a = q[..., : heads * k].unflatten(-1, (heads, k)).transpose(1, 2)
    b = kv[..., heads * k: 2 * heads * k].unflatten(-1, (heads, k)).permute(0, 2, 3, 1)
    return a, b


ADVERSARIAL = (
    AdversarialCase(
        "wide_dynamic_range",
        "rows of A scaled log-uniformly from 1e-3 to 1e2: breaks kernels that lose small rows "
        "(low-precision accumulation, a global scale) or overflow large ones",
        _wide_dynamic_range,
    ),
    AdversarialCase(
        "k_equals_one",
        "K = 1 (an outer product): one partial K tile that is almost all mask",
        _k_equals_one,
    ),
    AdversarialCase(
        "tall_skinny",
        "4M x 3 output: N far below any BLOCK_N, M spanning many row blocks",
        _tall_skinny,
    ),
    AdversarialCase(
        "common_offset",
        "A = 32 + noise (4 + noise in fp32) against zero-mean columns of B: C is O(1) but the "
        "partial sums are ~32, so a fp16/bf16 accumulator loses the answer to cancellation",
        _common_offset,
    ),
    AdversarialCase(
        "transposed_b",
        "B is a column-major view (x @ weight.t(), q @ k.transpose(-2, -1)): breaks kernels "
        "that assume contiguous B",
        _transposed_b,
    ),
    AdversarialCase(
        "views_of_fused_projections",
        "4-D A and Bᵀ cut out of a fused qkv projection, batch dims that no stride merges: "
        "breaks kernels that assume contiguous or 3-D operands",
        _views_of_fused_projections,
    ),
)


def flops(shape: Shape) -> float:
    # One multiply and one add per (b, m, n, k).
    batch, m, n, k = shape
    return 2.0 * batch * m * n * k


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    # A and B read once, C written once.
    batch, m, n, k = shape
    return float(batch * (m * k + k * n + m * n)) * element_size(dtype)


def _matmul_shape(op: OpCall, ctx: Context) -> Extracted:
    name = op.name
    if name == "aten::linear":
        x, w = arg_shape(op, 0), arg_shape(op, 1)
        if not x or len(w) != 2:
            return None
        params = {"bias": True} if has_tensor(op, 2) else {}
        return {"B": 1, "M": shape_numel(x[:-1]), "N": w[0], "K": x[-1]}, params
    params = {"b_transposed": True} if _b_is_transposed(op, ctx) else {}
    if name in ("aten::addmm", "aten::_addmm_activation", "aten::mm"):
        a_index = 0 if name == "aten::mm" else 1
        a, b = arg_shape(op, a_index), arg_shape(op, a_index + 1)
        if len(a) != 2 or len(b) != 2:
            return None
        if name != "aten::mm":
            params["bias"] = True
        return {"B": 1, "M": a[0], "N": b[1], "K": a[1]}, params
    if name in ("aten::bmm", "aten::baddbmm"):
        a_index = 0 if name == "aten::bmm" else 1
        a, b = arg_shape(op, a_index), arg_shape(op, a_index + 1)
        if len(a) != 3 or len(b) != 3:
            return None
        return {"B": a[0], "M": a[1], "N": b[2], "K": a[2]}, params
    if name in ("aten::mv", "aten::addmv"):
        a = arg_shape(op, 0 if name == "aten::mv" else 1)
        if len(a) != 2:
            return None
        return {"B": 1, "M": a[0], "N": 1, "K": a[1]}, {}
    if name == "aten::matmul":
        a, b = arg_shape(op, 0), arg_shape(op, 1)
        if not a or not b:
            return None
        if len(b) == 1:
            return {"B": 1, "M": shape_numel(a[:-1]), "N": 1, "K": b[0]}, {}
        if len(b) == 2:  # x @ W: every leading dim of x is a row of one GEMM
            return {"B": 1, "M": shape_numel(a[:-1]), "N": b[1], "K": b[0]}, params
        m = a[-2] if len(a) >= 2 else 1
        batch = broadcast_numel(a[:-2], b[:-2])
        return {"B": batch, "M": m, "N": b[-1], "K": b[-2]}, params
    return None


def _is_column_major(strides: Any) -> bool:
    return (isinstance(strides, list) and len(strides) >= 2
            and all(isinstance(s, int) for s in strides) and strides[-2] == 1 and strides[-1] != 1)


def _swaps_last_two(view: OpCall, b: list[int]) -> bool:
    """Is `view` (transpose/t/permute) the op that made B by swapping its last two dims?"""
    x = arg_shape(view, 0)
    if len(x) != len(b) or len(b) < 2 or x[:-2] + [x[-1], x[-2]] != b:
        return False
    ndim = len(x)
    if view.name == "aten::t":
        return True
    if view.name == "aten::transpose":
        dims = [arg_value(view, 1), arg_value(view, 2)]
        if all(isinstance(d, int) for d in dims):
            return sorted(d % ndim for d in dims) == [ndim - 2, ndim - 1]
        return x[-1] != x[-2]  # arguments not recorded: the shapes alone must tell
    if view.name == "aten::permute":
        order = arg_value(view, 1)
        return isinstance(order, list) and [d % ndim for d in order] == (
            list(range(ndim - 2)) + [ndim - 1, ndim - 2])
    return False


def _b_is_transposed(op: OpCall, ctx: Context) -> bool:
    """Did B reach the op as the transposed view of a contiguous tensor (Q @ Kᵀ, x @ W.t())?

    aten::matmul records B's strides on the as_strided inside its own expand of B; otherwise
    the view op just before the product, in program order, shows it.
    """
    b = arg_shape(op, 2 if op.name in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm")
                  else 1)
    if len(b) < 2 or b[-1] == 1:
        return False
    for child in ctx.children.get(op.id, []):
        if child.name == "aten::expand" and arg_shape(child, 0) == b:
            inner = ctx.children.get(child.id, [])
            if inner and inner[0].name == "aten::as_strided":
                return _is_column_major(arg_value(inner[0], 2))
    position = ctx.position.get(op.id)
    if position is None or position == 0:
        return False
    return _swaps_last_two(ctx.roots[position - 1], b)


def _matmul_role(op: OpCall, ctx: Context) -> str:
    """Which matmul target a call belongs to. The roles follow how a model reaches the kernel:
    nn.Linear modules (routed by module), products with batch dims and the remaining 2-D GEMMs
    (both functional calls)."""
    if op.name == "aten::linear":
        return "linear"
    if op.name in ("aten::bmm", "aten::baddbmm"):
        return "batched"
    if op.name == "aten::matmul" and len(arg_shape(op, 1)) >= 3:
        return "batched"
    return "gemm"


# Every aten entry point of a GEMM (aten::linear: nn.Linear and F.linear).
MATMUL_ATEN_OPS = ("aten::linear", "aten::addmm", "aten::_addmm_activation", "aten::mm",
                   "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::mv", "aten::addmv")
# Per functional role, the calls verify's router intercepts (baddbmm, mv, addmv: none).
ROUTED_CALLS = {"batched": ("aten::matmul", "aten::bmm"),
                "gemm": ("aten::matmul", "aten::mm", "aten::addmm")}


def _site_route(site: SiteKey, module_type: str | None, modules: Mapping[str, ModuleInfo]) -> str:
    """nn.Linear is routed as a module (F.linear elsewhere is not); the other roles' calls as
    the calls they are."""
    if site.role == "linear":
        if module_type is None:
            return UNKNOWN
        return MODULE if module_type in LINEAR_TYPES else "no: F.linear outside nn.Linear"
    if site.aten_op in ROUTED_CALLS.get(site.role, ()):
        return CALL
    return f"no: {site.aten_op.removeprefix('aten::')} is not routed"


SPEC = OpSpec(
    name="matmul",
    dims=("B", "M", "N", "K"),
    reference=reference.matmul,
    stock=torch.matmul,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=True,
    smoke_shape=(2, 64, 48, 40),
    sweep=(
        (1, 4096, 4096, 4096),
        (1, 8192, 8192, 8192),
        (1, 4096, 11008, 4096),   # LLaMA-7B up/gate projection, 4096 tokens
        (1, 4096, 4096, 11008),   # LLaMA-7B down projection
        (1, 16, 4096, 4096),      # decode: a handful of tokens
        (1, 4095, 4097, 1023),    # ragged in every dim
        (1, 1024, 50257, 1024),   # GPT-2-medium LM head, odd vocab
        (64, 512, 1024, 2048),    # torch.bmm (KernelBench's batched GEMM)
        (1024, 512, 512, 96),     # attention scores Q @ Kᵀ: 128 sequences x 8 heads, D = 96
        (1024, 512, 96, 512),     # attention output P @ V at the same size
    ),
    cpu_sweep=(
        (1, 64, 64, 64),
        (1, 96, 80, 72),
        (1, 33, 65, 17),
        (1, 1, 96, 64),
        (1, 96, 1, 64),
        (1, 50, 70, 90),
        (3, 40, 24, 72),
        (4, 17, 33, 16),
    ),
    edge_shapes=(
        (1, 1023, 1537, 4097),
        (1, 4097, 1023, 1537),
        (1, 1, 4096, 4096),
        (1, 4096, 1, 4096),
        (1, 4096, 4096, 1),
        (1, 1, 1, 8192),
        (97, 513, 257, 80),       # odd batch of odd attention-sized matrices
        (65537, 16, 16, 16),      # more matrices than a CUDA grid's y or z axis holds
    ),
    cpu_edge_shapes=(
        (1, 1, 1, 1),
        (1, 1, 33, 17),
        (1, 45, 1, 70),
        (1, 31, 29, 1),
        (1, 95, 93, 91),
        (5, 1, 19, 7),
        (2, 31, 1, 33),
    ),
    bench_shapes=((1, 4096, 4096, 4096), (1, 16, 4096, 4096), (1024, 512, 512, 96)),
    adversarial=ADVERSARIAL,
    aten_ops={name: AtenRule(_matmul_shape, role=_matmul_role) for name in MATMUL_ATEN_OPS},
    site_route=_site_route,
    # Defaults hold at every K thanks to the fan-in scaling above (see the module docstring).
    tolerances=dict(DEFAULT_TOLERANCES),
    # C's elements are K-term sums that may cancel: an honest kernel's error is ~eps * sum |a||b|,
    # which no bound relative to a row of C holds (an N = 1 or N = 2 row cancelling to ~0).
    cancelling=True,
    notes="FLOPs = 2*B*M*N*K. Shapes are BxMxNxK (B = 1: a 2-D GEMM, e.g. a linear layer). B is "
    "scaled by 1/sqrt(K) like a linear layer's weight, so C is O(1) and fp32 is held to 1e-4 at "
    "every K; fp32 kernels must use ieee (or a verified tf32x3) dots, not plain tf32.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


def _fake_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.matmul's output for operands of two or more dims: the batch dims broadcast."""
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return a.new_empty((*batch, a.shape[-2], b.shape[-1]))


def _matmul_gradient(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    """dA = dC @ Bᵀ, dB = Aᵀ @ dC, each summed back over the batch dims it was broadcast to."""
    (a, b), _ = saved_inputs(ctx)
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = (grad @ b.transpose(-1, -2)).sum_to_size(a.shape)
    if ctx.needs_input_grad[1]:
        grad_b = (a.transpose(-1, -2) @ grad).sum_to_size(b.shape)
    return grad_a, grad_b


def _recognize_linear(module: nn.Module, kernel: RoutedKernel) -> dict[str, Any] | None:
    return {} if plain_linear(module) else None


def _linear_inputs(route: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
                   ) -> tuple[Any, ...] | str:
    x = only_tensor_argument(args, kwargs)
    if x is None:
        return "arguments"
    module = route.module
    return x, module_attribute(module, "weight"), module_attribute(module, "bias")


def _plan_linear(route: Any, x: torch.Tensor, weight: torch.Tensor,
                 bias: torch.Tensor | None) -> Plan:
    """nn.Linear: x[..., K] @ Wᵀ + bias, with Wᵀ made contiguous once and cached until the
    weight changes. Under autograd (a weight that needs a gradient) and under torch.compile the
    kernel reads Wᵀ as a strided view instead, so gradients reach the parameter, with no copy."""
    if x.ndim == 0 or x.shape[-1] != weight.shape[1]:
        return "arguments"
    why = call_refusal(route.kernel, x, weight, *(() if bias is None else (bias,)))
    if why:
        return why
    grad = torch.is_grad_enabled()
    # a view: autograd reaches the parameter, the compiler sees no copy
    transposed_view = torch.compiler.is_compiling() or (grad and weight.requires_grad)
    call = kernel_caller(route.kernel, x, weight)
    width, rows = x.shape[-1], x.ndim != 2
    shape = (*x.shape[:-1], weight.shape[0])

    def run(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> Outcome:
        weight_t = weight.t() if transposed_view else _cached_transpose(route, weight)
        out, why = call(x.reshape(-1, width) if rows else x, weight_t)
        if why:
            return None, why
        if bias is not None:
            out = out + bias if grad else out.add_(bias)
        return (out.reshape(shape) if rows else out), None

    return run


def _cached_transpose(route: Any, weight: torch.Tensor) -> torch.Tensor:
    """Wᵀ, contiguous, made again only when the weight's storage or version changes."""
    key = (weight.data_ptr(), weight._version, weight.dtype, weight.device)
    if route.cache.get("key") != key:
        route.cache["weight_t"] = weight.detach().t().contiguous()
        route.cache["key"] = key
    return route.cache["weight_t"]


MATMUL_SIGNATURES: dict[Any, tuple[str, ...]] = {
    torch.matmul: ("input", "other"), torch.Tensor.matmul: ("input", "other"),
    torch.Tensor.__matmul__: ("input", "other"), torch.bmm: ("input", "mat2"),
    torch.Tensor.bmm: ("input", "mat2"), torch.mm: ("input", "mat2"),
    torch.Tensor.mm: ("input", "mat2"),
}
BATCHED_FUNCTIONS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm,
                     torch.Tensor.bmm)
GEMM_FUNCTIONS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm,
                  torch.Tensor.mm)


def _plan_matmul(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                 kwargs: Mapping[str, Any], _stats: RouteStats) -> Plan:
    """A @ B with B batched (role "batched": B has three or more dims, as in attention's Q @ Kᵀ
    and P @ V or bmm) or 2-D (role "gemm": x @ W, mm); the kernel is batched like torch.matmul."""
    names = MATMUL_SIGNATURES[func]
    bound = bind_arguments(args, kwargs, names, (REQUIRED, REQUIRED))
    if bound is None:
        return "arguments"
    a, b = bound[names[0]], bound[names[1]]
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.ndim < 2 or \
            b.ndim < 2 or (b.ndim >= 3) != (kernel.role == "batched"):
        return NOT_MINE
    if a.shape[-1] != b.shape[-2]:
        return "shape"
    why = call_refusal(kernel, a, b)
    if why:
        return why
    return argument_runner(kernel_caller(kernel, a, b), names, args, names)


def _plan_addmm(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                kwargs: Mapping[str, Any], _stats: RouteStats) -> Plan:
    """torch.addmm(bias, x, W) (HF's Conv1D), with beta = alpha = 1: x @ W + bias."""
    names = ("input", "mat1", "mat2", "beta", "alpha")
    bound = bind_arguments(args, kwargs, names, (REQUIRED, REQUIRED, REQUIRED, 1, 1))
    if bound is None:
        return "arguments"
    bias, a, b = bound["input"], bound["mat1"], bound["mat2"]
    if not all(isinstance(t, torch.Tensor) for t in (bias, a, b)) or a.ndim != 2 or b.ndim != 2:
        return NOT_MINE
    if bound["beta"] != 1 or bound["alpha"] != 1:
        return "beta or alpha"
    why = call_refusal(kernel, a, b, bias)
    if why:
        return why
    call, grad = kernel_caller(kernel, a, b), torch.is_grad_enabled()
    get_bias, get_a, get_b = (argument_getter(names, args, name) for name in names[:3])

    def run(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Outcome:
        out, why = call(get_a(args, kwargs), get_b(args, kwargs))
        if why:
            return None, why
        bias = get_bias(args, kwargs)
        return (out + bias if grad else out.add_(bias)), None

    return run


INTEGRATION = Integration(
    schema="(Tensor a, Tensor b) -> Tensor",  # batched like torch.matmul
    fake=_fake_matmul,
    backward="analytic",
    gradient=_matmul_gradient,
    # Role "linear" (and "": a matmul kernel of a run made before roles) routes nn.Linear.
    module_route=ModuleRoute(_recognize_linear, _linear_inputs, _plan_linear,
                             roles=("linear", "")),
    call_routes={
        "batched": (CallRoute(BATCHED_FUNCTIONS, plan=_plan_matmul),),
        "gemm": (CallRoute(GEMM_FUNCTIONS, plan=_plan_matmul),
                 CallRoute((torch.addmm, torch.Tensor.addmm), plan=_plan_addmm)),
    },
    example=lambda dtype: (torch.empty(64, 128, dtype=dtype), torch.empty(128, 64, dtype=dtype)),
)
