"""gelu: y = x·Φ(x) elementwise over x[M, N] (approximate="tanh": GPT-2's tanh form).

The tenth kernel type, and the pattern for adding one: this file (reference, inputs, shapes,
formulas, what the profiler maps to it, and below the marker how a finished kernel joins a
model), its starter `autokernel/kernels/gelu.py`, and its tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.integrate.custom_ops import saved_inputs
from autokernel.integrate.integration import CallRoute, Integration, ModuleRoute, Plan
from autokernel.integrate.routing import RoutedKernel, RouteStats
from autokernel.integrate.route_helpers import (
    REQUIRED,
    bind_arguments,
    call_refusal,
    kernel_caller,
    only_tensor_argument,
    positional_arity,
    probe_close,
    probe_passes,
    probe_tensor,
)
from autokernel.integrate.plans import argument_runner
from autokernel.ops.rowwise import (
    ROW_BENCH_SHAPES, ROW_CPU_EDGE_SHAPES, ROW_CPU_SWEEP, ROW_EDGE_SHAPES, ROW_SWEEP,
)
from autokernel.ops.spec import (
    AdversarialCase, AtenRule, Inputs, OpSpec, Shape, element_size, sample,
)
from autokernel.profiling.callsites import Context, Extracted
from autokernel.profiling.site_readers import arg_shape, arg_value, shape_numel
from autokernel.profiling.canonical import gelu_of, region
from autokernel.profiling.events import OpCall
from autokernel.profiling.graph_match import GraphContext, whole_forward
from autokernel.profiling.site_routes import CALL, MODULE

DIMS = ("M", "N")
APPROXIMATIONS = ("none", "tanh")


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU in float32 (float64 for float64 inputs), returned in x's dtype: x·Φ(x) with the
    exact normal CDF, or with approximate="tanh" 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    xc = x.to(compute)
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (xc + 0.044715 * xc.pow(3))
        return (0.5 * xc * (1.0 + torch.tanh(inner))).to(x.dtype)
    return (0.5 * xc * (1.0 + torch.erf(xc * math.sqrt(0.5)))).to(x.dtype)


def stock_gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return F.gelu(x, approximate=approximate)


def make_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
    approximate: str = "none",
) -> Inputs:
    # GELU is finite for every finite input; 1e3 keeps 7-sigma draws inside fp16's range.
    return (sample(shape, dtype, device, generator, distribution, large_scale=1e3), approximate)


def flops(shape: Shape) -> float:
    # About 8 per element: scale, erf (or cube and tanh), add one, two multiplies.
    m, n = shape
    return 8.0 * m * n


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    m, n = shape
    return 2.0 * m * n * element_size(dtype)  # x read once, y written once


def _saturating(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", approximate: str = "none",
) -> Inputs:
    # ±6e4 (near fp16 max): x³ overflows fp16 unless computed in fp32, and a tanh written as
    # exp(2u) overflows to inf; the answer is x or 0.
    x = 6.0e4 * sample(shape, torch.float32, device, generator, "uniform")
    return (x.to(dtype), approximate)


def _tiny(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", approximate: str = "none",
) -> Inputs:
    # GELU(x) ≈ x/2 near 0: a kernel that flushes or rounds early loses every digit here.
    x = 1.0e-3 * sample(shape, torch.float32, device, generator, "normal")
    return (x.to(dtype), approximate)


def _negative_tail(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", approximate: str = "none",
) -> Inputs:
    # x in [-12, -3]: 1 + erf(x/√2) cancels to (nearly) 0; the result must be tiny, never NaN.
    x = -3.0 - 9.0 * sample(shape, torch.float32, device, generator, "positive")
    return (x.to(dtype), approximate)


ADVERSARIAL = (
    AdversarialCase("saturating", "uniform in ±6e4: x³ and exp(2u) overflow unless the kernel "
                    "computes in fp32 and saturates tanh", _saturating),
    AdversarialCase("tiny", "1e-3·N(0, 1): GELU ≈ x/2, relative error shows", _tiny),
    AdversarialCase("negative_tail", "x in [-12, -3]: 1 + erf cancels; tiny outputs, no NaN",
                    _negative_tail),
)


def _gelu_call_shape(op: OpCall, ctx: Context) -> Extracted:
    """aten::gelu(self, approximate): the rows and the last dim of x, and the approximation.
    torch.profiler records no string arguments, so the approximation comes from the nn.GELU
    module around the call; a functional F.gelu(x, approximate="tanh") site has none, its kernel
    is verified for the exact form, and the route leaves its tanh-form calls to PyTorch."""
    x = arg_shape(op, 0)
    if not x or not x[-1]:
        return None
    approximate = arg_value(op, 1) or ctx.module_attr(op, ("approximate",))
    params = {"approximate": approximate} if approximate in APPROXIMATIONS else {}
    return {"M": shape_numel(x) // x[-1], "N": x[-1]}, params


WRITTEN_OUT = "gelu(written out)"


def _find_gelu_in_graph(gctx: GraphContext) -> None:
    """F.gelu / nn.GELU with its `approximate` (which torch.profiler drops), and the erf and
    tanh formulas written out (`canonical.gelu_of`), outermost call first."""
    for node in reversed(gctx.graph.nodes):
        if node.op not in ("gelu", "mul", "div") or gctx.is_claimed(node) or not node.outputs:
            continue
        found = gelu_of(gctx, node.outputs[0])
        if found is None:
            continue
        nodes = region(gctx, node.outputs[0], {found.x})
        x = gctx.shape(found.x)
        if not nodes or not x or not x[-1]:
            continue
        label = WRITTEN_OUT if found.spelled_out else "aten::gelu"
        params: dict[str, Any] = {"approximate": found.approximate}
        if found.spelled_out and whole_forward(gctx, nodes):
            # a GELU module's whole forward (minGPT's NewGELU), or the model's (KernelBench 88)
            params["module"] = True
        site = gctx.site("gelu", nodes, label, {"M": shape_numel(x) // x[-1], "N": x[-1]}, params,
                         gctx.dtype(found.x))
        gctx.claim(nodes, "gelu", site)


def _site_route(site: Any, module_type: str | None, modules: Mapping[str, Any]) -> str:
    """F.gelu and nn.GELU are intercepted; a formula written out is routed when it is a
    module's whole forward (after a probe, `_recognize_gelu_module`), not inline."""
    if site.aten_op == WRITTEN_OUT:
        if dict(site.notes).get("module"):
            return MODULE
        return "no: written out inline (F.gelu, nn.GELU and GELU modules are routed)"
    return CALL


def _approximation_mismatch(site_params: Mapping[str, Any], shape: list[int],
                            verified: Mapping[str, Any]) -> str | None:
    """The route leaves calls of the other approximation to PyTorch."""
    mine = site_params.get("approximate", "none")
    theirs = verified.get("approximate", "none")
    return None if mine == theirs else f"no: approximate={mine} (verified: {theirs})"


SPEC = OpSpec(
    name="gelu",
    dims=DIMS,
    reference=gelu,
    stock=stock_gelu,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=False,
    smoke_shape=(4, 37),
    sweep=ROW_SWEEP + ((8192, 14336), (4096, 16384)),  # MLP widths: LLaMA-3 8B, GPT-2 XL
    cpu_sweep=ROW_CPU_SWEEP,
    edge_shapes=ROW_EDGE_SHAPES,
    cpu_edge_shapes=ROW_CPU_EDGE_SHAPES,
    bench_shapes=ROW_BENCH_SHAPES,
    adversarial=ADVERSARIAL,
    # x * (1 + erf(x / sqrt 2)) / 2 cancels in the negative tail: an honest fp32 kernel is
    # ~1e-7 off there in absolute terms, many times a bound relative to a row of ~1e-7 outputs
    # (the starter failed the row rule on half the seeds of negative_tail). The element rule's
    # atol is the floor.
    cancelling=True,
    # F.gelu and nn.GELU (which calls it) reach the profiler as aten::gelu.
    aten_ops={"aten::gelu": AtenRule(_gelu_call_shape)},
    graph_patterns=(_find_gelu_in_graph,),
    site_route=_site_route,
    param_mismatch=_approximation_mismatch,
    notes="elementwise GELU of x[M, N] (exact erf form unless approximate='tanh'); FLOPs = 8·M·N; "
    "bytes = read x + write y.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


def _gelu_gradient(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    """PyTorch's closed-form GELU derivative, in float32, at the saved input."""
    (x, approximate), _ = saved_inputs(ctx)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    grad_x = torch.ops.aten.gelu_backward(grad.to(compute), x.to(compute),
                                          approximate=approximate)
    return grad_x.to(x.dtype), None


GELU_SIGNATURES: dict[Any, tuple[tuple[str, ...], tuple[Any, ...]]] = {
    F.gelu: (("input", "approximate"), (REQUIRED, "none")),
}


def _plan_gelu(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
               kwargs: Mapping[str, Any], _stats: RouteStats) -> Plan:
    """F.gelu(x, approximate=...), which nn.GELU's forward calls too."""
    names, defaults = GELU_SIGNATURES[func]
    bound = bind_arguments(args, kwargs, names, defaults)
    if bound is None:
        return "arguments"
    x, approximate = bound["input"], bound["approximate"]
    if not isinstance(x, torch.Tensor) or x.numel() == 0:
        return "arguments"
    verified = kernel.params.get("approximate", "none")
    if approximate != verified:
        return f"approximate={approximate!r} (verified: {verified!r})"
    why = call_refusal(kernel, x)
    if why:
        return why
    return argument_runner(kernel_caller(kernel, x), names, args, ("input",), approximate)


def _recognize_gelu_module(module: nn.Module, kernel: RoutedKernel) -> dict[str, Any] | None:
    """A module of the model's own code (not torch.nn's) with no parameters or children whose
    forward(x) computes GELU in the kernel's form: minGPT's NewGELU, HF's GELU classes, a
    KernelBench model that is the formula. nn.GELU is the call route's (it calls F.gelu)."""
    if type(module).__module__.startswith("torch.") or any(True for _ in module.parameters()) \
            or any(True for _ in module.children()) or positional_arity(module) != 1:
        return None
    approximate = kernel.params.get("approximate", "none")

    def computes_gelu() -> bool:
        # F.gelu is the oracle, not kernel.reference: an exported module carries reference.py's
        # oracles only, and GELU's lives in this op entry (its probe failed in every export).
        x = probe_tensor((3, 8), torch.ones((), dtype=torch.float32,
                                            device=kernel.op.device_type))
        return probe_close(kernel, module.forward(x), F.gelu(x, approximate=approximate))

    return {"approximate": approximate} if probe_passes(computes_gelu) else None


def _gelu_module_inputs(route: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
                        ) -> tuple[Any, ...] | str:
    x = only_tensor_argument(args, kwargs)
    return "arguments" if x is None else (x,)


def _plan_gelu_module(route: Any, x: torch.Tensor) -> Plan:
    if x.numel() == 0:
        return "arguments"
    why = call_refusal(route.kernel, x)
    if why:
        return why
    call, approximate = kernel_caller(route.kernel, x), route.details["approximate"]
    return lambda x: call(x, approximate)


INTEGRATION = Integration(
    schema="(Tensor x, str approximate) -> Tensor",
    fake=lambda x, approximate: torch.empty_like(x, memory_format=torch.contiguous_format),
    backward="analytic",
    gradient=_gelu_gradient,
    call_routes={"": (CallRoute(tuple(GELU_SIGNATURES), plan=_plan_gelu),)},
    # GELU written out as a module's whole forward (after a probe).
    module_route=ModuleRoute(_recognize_gelu_module, _gelu_module_inputs, _plan_gelu_module,
                             whole_forward=True),
    example=lambda dtype: (torch.empty(64, 128, dtype=dtype), "none"),
)
