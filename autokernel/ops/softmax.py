"""softmax: y = softmax(x) over the last dimension of x[M, N].

Over a dim that is not the last, a shape (M, N, K) is softmax over dim 1 of x[M, N, K] (see
`OpSpec.axis_dim`), e.g. torch.softmax(x, dim=1) of an NCHW tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from autokernel import reference
from autokernel.integrate.custom_ops import fake_like_first, saved_inputs
from autokernel.integrate.integration import CallRoute, Integration, Plan
from autokernel.integrate.routing import Outcome, RoutedKernel, RouteStats
from autokernel.integrate.route_helpers import (
    REQUIRED,
    bind_arguments,
    call_refusal,
    input_over_one_dim,
    over_axis_caller,
)
from autokernel.integrate.plans import argument_getter, argument_runner
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
from autokernel.profiling.callsites import Context, Extracted, SiteKey
from autokernel.profiling.site_readers import arg_shape, arg_value, dims_over_axis, single_axis
from autokernel.profiling.events import ModuleInfo, OpCall
from autokernel.profiling.canonical import region
from autokernel.profiling.graph_attention import softmax_of
from autokernel.profiling.graph_match import GraphContext
from autokernel.profiling.site_routes import CALL

DIMS = ("M", "N")


def stock_softmax(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    # torch.softmax accumulates fp16/bf16 in fp32 and returns x's dtype, like the reference.
    return torch.softmax(x, dim=axis)


def _row_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    # Softmax is finite for every finite input; 1e3 keeps 7-sigma draws inside fp16's range.
    return (sample(shape, dtype, device, generator, distribution, large_scale=1e3),)


make_inputs = along_axis(_row_inputs)


def flops(shape: Shape) -> float:
    # 5 per element: max-compare, subtract max, exp, add to the row sum, scale by 1/sum.
    m, n = rows_and_width(shape)
    return 5.0 * m * n


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    m, n = rows_and_width(shape)
    return 2.0 * m * n * element_size(dtype)  # x read once, y written once


def _big_value(dtype: torch.dtype) -> float:
    # Large enough that exp() overflows unless the row max is subtracted; exact in every dtype.
    return 6.0e4 if dtype == torch.float16 else 1.0e4


def _equal_large(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, n = shape
    signs = torch.where(torch.arange(m, device=device) % 2 == 0, 1.0, -1.0)
    x = (signs[:, None] * _big_value(dtype)).expand(m, n)
    return (x.to(dtype).contiguous(),)


def _wide_range(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    # ±1e4 is representable in fp16 (max 65504).
    x = sample(shape, torch.float32, device, generator, "uniform") * 1.0e4
    return (x.to(dtype),)


def _negative_offset(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    x = sample(shape, torch.float32, device, generator, "normal") - 1.0e4
    return (x.to(dtype),)


def _masked_neg_inf(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, n = shape
    x = sample(shape, torch.float32, device, generator, "normal")
    masked = torch.rand(shape, generator=generator, device=device) < 0.5
    # The leading rows are -inf everywhere but their last column, so a whole leading block of a
    # long row is -inf: the trap for an online softmax (exp(-inf - -inf) = NaN).
    lead = max(1, m // 4)
    masked[:lead, :] = True
    masked[:lead, -1] = False
    rows = torch.arange(lead, m, device=device)
    keep = torch.randint(0, n, (m - lead,), generator=generator, device=device)
    masked[rows, keep] = False  # never a fully -inf row
    return (x.masked_fill(masked, float("-inf")).to(dtype),)


def _one_hot(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    m, n = shape
    x = sample(shape, torch.float32, device, generator, "normal")
    hot = torch.randint(0, n, (m,), generator=generator, device=device)
    x[torch.arange(m, device=device), hot] = _big_value(dtype)
    return (x.to(dtype),)


ADVERSARIAL = (
    AdversarialCase(
        "equal_large",
        "every entry of a row equal to ±1e4 (6e4 in fp16): exp overflows unless the row max is "
        "subtracted; the answer is exactly 1/N",
        along_axis(_equal_large),
    ),
    AdversarialCase(
        "wide_range",
        "uniform in ±1e4: near one-hot rows, exp overflows without the max subtraction",
        along_axis(_wide_range),
    ),
    AdversarialCase(
        "negative_offset",
        "normal values around -1e4: every exp underflows to 0 (0/0 = NaN) without the max "
        "subtraction",
        along_axis(_negative_offset),
    ),
    AdversarialCase(
        "masked_neg_inf",
        "about half the entries -inf (attention masks), some rows -inf except their last column, "
        "never a fully -inf row: catches exp(-inf - -inf) = NaN in online/blocked max tracking",
        along_axis(_masked_neg_inf),
    ),
    AdversarialCase(
        "one_hot",
        "one huge entry per row among normal values: the output must be one-hot, the rest 0",
        along_axis(_one_hot),
    ),
)


def _softmax_shape(op: OpCall, ctx: Context) -> Extracted:
    x = arg_shape(op, 0)
    if not x:
        return None
    dim = arg_value(op, 1)
    axis = len(x) - 1 if dim is None else single_axis(dim, len(x))  # None: not recorded
    if axis is None:
        return None
    return dims_over_axis(x, axis)


WRITTEN_OUT = "softmax(written out)"


def _find_written_softmax(gctx: GraphContext) -> None:
    """exp(x - max(x)) / sum(..) written out, over any one dim (`graph_attention.softmax_of`);
    F.softmax is the single-op rule's."""
    for node in gctx.graph.nodes:
        if node.op not in ("div", "mul", "exp") or gctx.is_claimed(node) or not node.outputs:
            continue
        found = softmax_of(gctx, node.outputs[0])
        if found is None:
            continue
        x, dim = found
        nodes = region(gctx, node.outputs[0], {x})
        if not nodes:
            continue
        named, params = dims_over_axis(gctx.shape(x), dim)
        site = gctx.site("softmax", nodes, WRITTEN_OUT, named, params, gctx.dtype(x))
        gctx.claim(nodes, "softmax", site)


def _site_route(site: SiteKey, module_type: str | None, modules: Mapping[str, ModuleInfo]) -> str:
    """The router intercepts softmax; a site whose profile names its dim is not over the last."""
    if site.aten_op == WRITTEN_OUT:
        return "no: written out (only torch, F and Tensor softmax are routed)"
    return "no: not over the last dim" if "dim" in dict(site.params) else CALL


SPEC = OpSpec(
    name="softmax",
    dims=DIMS,
    reference=reference.softmax,
    stock=stock_softmax,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=False,
    smoke_shape=(4, 37),
    sweep=ROW_SWEEP + ((2048, 50257), (4096, 128256), AXIS_SWEEP[1]),
    cpu_sweep=ROW_CPU_SWEEP + AXIS_CPU_SWEEP,
    edge_shapes=ROW_EDGE_SHAPES + ((1, 128256),) + AXIS_EDGE_SHAPES,
    cpu_edge_shapes=ROW_CPU_EDGE_SHAPES + AXIS_CPU_EDGE_SHAPES,
    bench_shapes=ROW_BENCH_SHAPES,
    axis_dim="K",
    adversarial=ADVERSARIAL,
    aten_ops={name: AtenRule(_softmax_shape) for name in ("aten::softmax", "aten::_softmax")},
    graph_patterns=(_find_written_softmax,),
    site_route=_site_route,
    notes="softmax over the last dim (or over dim 1 of x[M, N, K]); FLOPs = 5·M·N·K (max, "
    "subtract, exp, sum, scale); "
    "bytes = read x + write y.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


def _softmax_gradient(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    args, y = saved_inputs(ctx)
    x, axis = args[0], (args[1] if len(args) > 1 else -1)
    y32, g32 = y.float(), grad.float()
    grad_x = y32 * (g32 - (g32 * y32).sum(dim=axis, keepdim=True))
    return (grad_x.to(x.dtype), *[None] * (len(args) - 1))


SOFTMAX_SIGNATURES: dict[Any, tuple[tuple[str, ...], tuple[Any, ...]]] = {
    torch.softmax: (("input", "dim", "dtype"), (REQUIRED, REQUIRED, None)),
    torch.Tensor.softmax: (("input", "dim", "dtype"), (REQUIRED, REQUIRED, None)),
    F.softmax: (("input", "dim", "_stacklevel", "dtype"), (REQUIRED, None, 3, None)),
}


def _plan_softmax(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                  kwargs: Mapping[str, Any], _stats: RouteStats) -> Plan:
    names, defaults = SOFTMAX_SIGNATURES[func]
    bound = bind_arguments(args, kwargs, names, defaults)
    found = input_over_one_dim(kernel, bound)
    if isinstance(found, str):
        return found
    x, axis = found
    assert bound is not None  # found: the call fits the signature
    if bound["dtype"] not in (None, x.dtype):
        return "dtype argument"
    if x.numel() == 0:
        return "empty"
    why = call_refusal(kernel, x)
    if why:
        return why
    call = over_axis_caller(kernel, x, axis)
    if x.ndim == 2 and axis == 1:
        return argument_runner(call, names, args, ("input",))
    get_x = argument_getter(names, args, "input")
    shape = tuple(x.shape)

    def run(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Outcome:
        out, why = call(get_x(args, kwargs))
        return (None, why) if why else (out.reshape(shape), None)

    return run


INTEGRATION = Integration(
    schema="(Tensor x, int axis=-1) -> Tensor",
    fake=fake_like_first,
    backward="analytic",
    gradient=_softmax_gradient,
    call_routes={"": (CallRoute(tuple(SOFTMAX_SIGNATURES), plan=_plan_softmax),)},
    example=lambda dtype: (torch.empty(64, 128, dtype=dtype),),
)
