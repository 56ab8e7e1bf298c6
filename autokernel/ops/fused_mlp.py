"""fused_mlp: the SwiGLU MLP, (silu(x W_gateᵀ) * (x W_upᵀ)) W_downᵀ; shapes written M x D x H.

x [M, D]; w_gate, w_up [H, D]; w_down [D, H] (nn.Linear layouts). The hidden activation is rounded
to x's dtype before the down projection, as in the reference (a real model stores it).

Weights are scaled like an initialised linear layer's: divided by sqrt(fan-in) (D for gate/up,
H for down), so gate, up, hidden and output all stay O(1) at every width and fp32 keeps the
default 1e-4. "positive" weights (mean 0.5) are scaled by 4/fan-in instead: with 1/sqrt(fan-in)
the hidden activation would grow like D and the output like D*sqrt(H), past fp16's 65504 at
LLaMA-70B widths.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autokernel import reference
from autokernel.integrate.integration import Integration, ModuleRoute
from autokernel.integrate.routing import (
    Outcome, RoutedKernel, _call_kernel, _close, _only_argument, _plain_linear, _positional_arity,
    _probe_inputs, _probe_passes, _refusal, _rows,
)
from autokernel.ops.spec import (
    DEFAULT_TOLERANCES,
    AdversarialCase,
    Inputs,
    OpSpec,
    Shape,
    element_size,
    sample,
)
from autokernel.profiling.callsites import (
    Context, _dtype, _has_tensor, _numel, _shape, _significant_unclaimed, _span,
)
from autokernel.profiling.events import OpCall

# "large" multiplies x by this, so the gate is ~N(0, 20²) and its tails pass ±88, where exp
# overflows fp32 (a careless silu returns NaN). w_up and w_down are divided by it, so up and the
# output stay O(1): the oracle runs on upcast inputs and does NOT round hidden, so a kernel's
# (correct) bf16 rounding of hidden costs ~2^-9 x |output| absolutely, and an output of ~20
# would put that past atol=0.02 wherever the output nearly cancels.
LARGE_SCALE = 20.0


def _weights(
    h: int, d: int, device: str | torch.device, generator: torch.Generator, distribution: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w_gate, w_up [h, d] and w_down [d, h] in float32, fan-in scaled (see module docstring)."""
    def draw(shape: tuple[int, int], fan_in: int) -> torch.Tensor:
        w = sample(shape, torch.float32, device, generator, distribution, large_scale=1.0)
        return w * (4.0 / fan_in if distribution == "positive" else 1.0 / math.sqrt(fan_in))

    return draw((h, d), d), draw((h, d), d), draw((d, h), h)


def make_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
    **params: Any,
) -> Inputs:
    if params:
        raise ValueError(f"fused_mlp takes no parameters; got {', '.join(sorted(params))}")
    m, d, h = shape
    x = sample((m, d), torch.float32, device, generator, distribution, large_scale=LARGE_SCALE)
    w_gate, w_up, w_down = _weights(h, d, device, generator, distribution)
    if distribution == "large":
        w_up, w_down = w_up / LARGE_SCALE, w_down / LARGE_SCALE
    return tuple(t.to(dtype) for t in (x, w_gate, w_up, w_down))


def _normal_f32(shape: Shape, device: str | torch.device, generator: torch.Generator
                ) -> list[torch.Tensor]:
    m, d, h = shape
    x = sample((m, d), torch.float32, device, generator, "normal")
    return [x, *_weights(h, d, device, generator, "normal")]


def _saturated_silu(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    x, w_gate, w_up, w_down = _normal_f32(shape, device, generator)
    # Gate pre-activations ~N(0, 100²): most sit beyond ±88, where exp(∓gate) overflows fp32.
    # silu must give ~gate above and -0 below; exp(g) / (1 + exp(g)) gives NaN above. up and
    # w_down shrink 10x each so the output stays O(1) (see LARGE_SCALE for why it must).
    return tuple(t.to(dtype) for t in (x, w_gate * 100.0, w_up / 10.0, w_down / 10.0))


def _single_token(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    _, d, h = shape
    return make_inputs((1, d, h), dtype, device, generator)


def _ragged_widths(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    m, d, h = shape
    return make_inputs((m, d + 3, h + 7), dtype, device, generator)


def _common_offset(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    x, w_gate, w_up, w_down = _normal_f32(shape, device, generator)
    # Every gate/up weight row sums to ~0, so the offset cancels: gate and up stay O(1) while
    # their running sums reach ~32 (a fp16/bf16 accumulator loses them to rounding).
    w_gate = w_gate - w_gate.mean(dim=1, keepdim=True)
    w_up = w_up - w_up.mean(dim=1, keepdim=True)
    return tuple(t.to(dtype) for t in (x + 32.0, w_gate, w_up, w_down))


def _strided_activations(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    m, d, h = shape
    x, w_gate, w_up, _ = (t.to(dtype) for t in _normal_f32((m, 2 * d, h), device, generator))
    w_down_t = sample((h, d), torch.float32, device, generator, "normal") / math.sqrt(h)
    # x, w_gate and w_up are column slices (row stride 2D); w_down is the transposed view of a
    # [H, D] tensor. Breaks kernels that assume contiguous operands.
    return x[:, :d], w_gate[:, d:], w_up[:, :d], w_down_t.to(dtype).t()


ADVERSARIAL = (
    AdversarialCase(
        "saturated_silu",
        "gate pre-activations ~N(0, 100²), mostly past ±88 where exp overflows fp32: breaks a "
        "silu written as exp(g) / (1 + exp(g)) (NaN) or evaluated in fp16",
        _saturated_silu,
    ),
    AdversarialCase(
        "single_token",
        "M = 1 (decode): one row against full-size weights, almost all of every row tile masked",
        _single_token,
    ),
    AdversarialCase(
        "ragged_widths",
        "D + 3 and H + 7: neither width a multiple of any block, masks on both reductions",
        _ragged_widths,
    ),
    AdversarialCase(
        "common_offset",
        "x = 32 + noise against zero-mean weight rows: gate/up are O(1) but their partial sums "
        "are ~32, so a fp16/bf16 accumulator loses the answer to cancellation",
        _common_offset,
    ),
    AdversarialCase(
        "strided_operands",
        "x, w_gate, w_up are column slices (row stride 2D) and w_down a transposed view: breaks "
        "kernels that assume contiguous inputs",
        _strided_activations,
    ),
)


def stock(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor
) -> torch.Tensor:
    """The eager chain a model runs: three F.linear calls, hidden stored in x's dtype."""
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def flops(shape: Shape) -> float:
    # Three GEMMs of M*D*H multiply-adds each (gate, up, down), 2 FLOPs per multiply-add. The
    # silu and product (~5 FLOPs per hidden element, M*H) are left out, as is usual.
    m, d, h = shape
    return 6.0 * m * d * h


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    # x read and the output written once, the three weights read once. The [M, H] hidden
    # round-trip a two-kernel implementation makes is not counted: minimum traffic.
    m, d, h = shape
    return float(2 * m * d + 3 * h * d) * element_size(dtype)


def liger_swiglu_mlp() -> Callable[..., torch.Tensor] | None:
    """Liger's SwiGLU MLP as its LigerSwiGLUMLP runs it: the three projections in cuBLAS, the
    SiLU·mul in one Triton kernel."""
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except ImportError:
        return None

    def run(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
            w_down: torch.Tensor) -> torch.Tensor:
        return F.linear(LigerSiLUMulFunction.apply(F.linear(x, w_gate), F.linear(x, w_up)),
                        w_down)

    return run


def _is_plain_linear(op: OpCall) -> bool:
    return op.name == "aten::linear" and len(_shape(op, 1)) == 2 and not _has_tensor(op, 2)


# silu(gate(x)) * up(x) evaluates gate, silu, up; up(x) * silu(gate(x)) evaluates up, gate, silu.
SWIGLU_ORDERS = (
    ["aten::linear", "aten::silu", "aten::linear", "aten::mul", "aten::linear"],
    ["aten::linear", "aten::linear", "aten::silu", "aten::mul", "aten::linear"],
)


def _find_swiglu(ctx: Context) -> None:
    seq = _significant_unclaimed(ctx)
    i = 0
    while i + 5 <= len(seq):
        window = seq[i:i + 5]
        names = [op.name.replace("aten::silu_", "aten::silu") for op in window]
        if names not in SWIGLU_ORDERS:
            i += 1
            continue
        linears = [op for op in window if op.name == "aten::linear"]
        silu = next(op for op in window if op.name.startswith("aten::silu"))
        mul = window[3]
        first, second, down = linears
        x, w = _shape(first, 0), _shape(first, 1)
        ok = (
            all(_is_plain_linear(op) for op in linears)
            and _shape(second, 0) == x and _shape(second, 1) == w and len(x) >= 1
        )
        if ok:
            hidden, d = w[0], w[1]
            h_shape = x[:-1] + [hidden]
            ok = (
                _shape(silu, 0) == h_shape
                and _shape(mul, 0) == h_shape and _shape(mul, 1) == h_shape
                and _shape(down, 0) == h_shape and _shape(down, 1) == [d, hidden]
            )
        if not ok:
            i += 1
            continue
        named = {"M": _numel(x[:-1]), "D": x[-1], "H": hidden}
        site = ctx.site("fused_mlp", ctx.common_module(window),
                        "swiglu(aten::linear x3, aten::silu, aten::mul)", named, {},
                        _dtype(first, ctx.record.dtype))
        ctx.claim(_span(ctx, window[0], window[-1]), "fused_mlp", ("swiglu", window[0].id), site)
        i += 5


SPEC = OpSpec(
    name="fused_mlp",
    dims=("M", "D", "H"),
    reference=reference.fused_mlp,
    stock=stock,
    liger=liger_swiglu_mlp,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=True,
    smoke_shape=(32, 64, 96),
    sweep=(
        (2048, 4096, 11008),   # LLaMA-7B
        (4096, 4096, 14336),   # LLaMA-3-8B / Mistral-7B
        (512, 2048, 5632),     # TinyLlama-1.1B
        (16, 4096, 11008),     # decode
        (2048, 5120, 13824),   # LLaMA-13B
        (1024, 8192, 28672),   # LLaMA-70B
        (2047, 3072, 8192),    # LLaMA-3.2-3B, ragged token count
        (1000, 1536, 8960),    # Qwen2-1.5B
        (8192, 4096, 14336),
    ),
    cpu_sweep=(
        (32, 64, 96),
        (33, 48, 80),
        (1, 64, 96),
        (64, 40, 72),
        (17, 96, 33),
        (50, 33, 64),
        (8, 16, 16),
    ),
    edge_shapes=(
        (1023, 4097, 1537),
        (4097, 1023, 2047),
        (1, 4096, 11008),
        (1537, 1, 4096),
        (2048, 4096, 1),
    ),
    cpu_edge_shapes=(
        (1, 1, 1),
        (1, 17, 33),
        (37, 1, 20),
        (20, 37, 1),
        (63, 65, 67),
    ),
    bench_shapes=((2048, 4096, 11008), (4096, 4096, 14336), (16, 4096, 11008)),
    adversarial=ADVERSARIAL,
    patterns=(_find_swiglu,),
    # Defaults hold at every width thanks to the fan-in scaling (module docstring). The largest
    # error source is the hidden rounding the op prescribes, which the upcast oracle does not
    # apply: ~2^-9 relative per hidden element in bf16, about 1/5 of the bf16 tolerance at
    # O(1) outputs.
    tolerances=dict(DEFAULT_TOLERANCES),
    notes="FLOPs = 6*M*D*H (gate, up, down GEMMs; silu and product not counted). Bytes = "
    "(2*M*D + 3*H*D)*dtype size: minimum traffic, the [M, H] hidden round-trip of a two-kernel "
    "design is not counted. Shapes are MxDxH. Hidden is rounded to x's dtype before the down "
    "projection; the upcast oracle does not round it, so that rounding counts as the kernel's "
    "error.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


def _fake_fused_mlp(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                    w_down: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], w_down.shape[0]))


def _swiglu_candidates(module: nn.Module) -> list[dict[str, Any]]:
    """(gate, up, down) name triples to probe: three bias-free Linear children, [H,D]×2, [D,H]."""
    if _positional_arity(module) != 1:
        return []
    linears: list[tuple[str, nn.Linear]] = []
    for name, child in module.named_children():
        if _plain_linear(child) and child.bias is None:
            linears.append((name, child))
        elif any(True for _ in child.parameters()):
            return []  # other weights take part: not a plain SwiGLU
    if len(linears) != 3:
        return []
    candidates = []
    for d_name, down in linears:  # every assignment the shapes allow (several when H == D)
        rest = [(n, m) for n, m in linears if n != d_name]
        d, h = down.weight.shape
        if all(tuple(m.weight.shape) == (h, d) for _, m in rest):
            (a, _), (b, _) = rest
            candidates += [{"projections": (a, b, d_name)}, {"projections": (b, a, d_name)}]
    return candidates


def _computes_swiglu(module: nn.Module, kernel: RoutedKernel, details: dict[str, Any]) -> bool:
    gate, up, down = (getattr(module, n).weight for n in details["projections"])
    x = _probe_inputs((3, gate.shape[1]), gate)
    return _close(kernel, module.forward(x), kernel.reference(x, gate, up, down))


def _recognize_swiglu(module: nn.Module, kernel: RoutedKernel) -> dict[str, Any] | str | None:
    """A SwiGLU MLP module: three bias-free nn.Linear children whose forward passes the probe (a
    GELU-gated MLP does not)."""
    candidates = _swiglu_candidates(module)
    for details in candidates:
        if _probe_passes(lambda: _computes_swiglu(module, kernel, details)):
            return details
    return "probe: does not compute down(silu(gate(x)) · up(x))" if candidates else None


def _fused_mlp_forward(route: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Outcome:
    x = _only_argument(args, kwargs)
    gate, up, down = (getattr(route.module, n).weight for n in route.details["projections"])
    if x is None or x.ndim == 0 or x.shape[-1] != gate.shape[1]:
        return None, "arguments"
    why = _refusal(route.kernel, x, gate, up, down)
    if why:
        return None, why
    out, why = _call_kernel(route.kernel, _rows(x, x.shape[-1]), gate, up, down)
    return (None, why) if why else (out.reshape(*x.shape[:-1], down.shape[0]), None)


INTEGRATION = Integration(
    schema="(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down) -> Tensor",
    fake=_fake_fused_mlp,
    backward="recompute",
    module_route=ModuleRoute(_recognize_swiglu, _fused_mlp_forward, whole_forward=True),
    example=lambda dtype: tuple(torch.empty(s, dtype=dtype)
                                for s in ((64, 128), (256, 128), (256, 128), (128, 256))),
)
