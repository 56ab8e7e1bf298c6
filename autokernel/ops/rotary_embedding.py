"""rotary_embedding: x·cos + rotate_half(x)·sin for x [B, H, S, D], cos and sin [S, D].

Rotate-half layout (HF LLaMA): the first half of the head dim pairs with the second half, and
cos/sin repeat their D/2 frequencies in both halves. D must be even.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from autokernel import reference
from autokernel.integrate.custom_ops import fake_like_first, saved_inputs
from autokernel.integrate.integration import Integration, ModuleRoute, Plan
from autokernel.integrate.routing import Outcome, RoutedKernel
from autokernel.integrate.route_helpers import (
    call_refusal,
    kernel_caller,
    positional_arity,
    probe_close,
    probe_passes,
    probe_tensor,
)
from autokernel.integrate.plans import module_attribute
from autokernel.ops.spec import AdversarialCase, Inputs, OpSpec, Shape, element_size, sample
from autokernel.profiling.callsites import significant_unclaimed, unclaimed_span, Context, SiteKey
from autokernel.profiling.site_readers import (
    arg_shape,
    arg_value,
    call_dtype,
    four_dims,
    is_last_dim,
    shape_numel,
)
from autokernel.profiling.events import ModuleInfo, OpCall
from autokernel.profiling.graph_rope import find_rotary, rotary_notes_route
from autokernel.profiling.site_routes import FUNCTION, MODULE, UNKNOWN

DIMS = ("B", "H", "S", "D")
ROPE_THETA = 10000.0
# Positions of a LLaMA-2 context; the inputs take a random window of them.
MAX_POSITIONS = 8192


def stock_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # There is no fused torch op: this is the eager formula models run, in x's dtype.
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The LLaMA cos/sin cache rows for `positions`: [len, head_dim], halves equal."""
    device = positions.device
    inv_freq = 1.0 / ROPE_THETA ** (
        torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    )
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _random_window(
    seq_len: int, device: str | torch.device, generator: torch.Generator, at_end: bool = False
) -> torch.Tensor:
    """`seq_len` consecutive positions starting at a random offset in [0, MAX_POSITIONS)."""
    room = max(0, MAX_POSITIONS - seq_len)
    start = room if at_end else int(
        torch.randint(0, room + 1, (1,), generator=generator, device=device).item()
    )
    return torch.arange(start, start + seq_len, device=device)


def _check_head_dim(shape: Shape) -> None:
    if shape[-1] % 2:
        raise ValueError(f"rotary_embedding needs an even head dim D; got {shape}")


def make_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    _check_head_dim(shape)
    # "large" is 64·N(0,1): larger |x| makes a correct float32 kernel miss the fp32 atol on
    # outputs that cancel (x1·cos - x2·sin ~ 0), since its products round at ulp(|x|).
    x = sample(shape, dtype, device, generator, distribution, large_scale=64.0)
    cos, sin = rope_cos_sin(_random_window(shape[2], device, generator), shape[3], dtype)
    return x, cos, sin


def flops(shape: Shape) -> float:
    # 3 per output element: x·cos, rotate_half(x)·sin, and their sum (the sign flip is free).
    b, h, s, d = shape
    return 3.0 * b * h * s * d


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    b, h, s, d = shape
    # x read and the output written once; cos and sin read once each (not once per head).
    return (2.0 * b * h * s * d + 2.0 * s * d) * element_size(dtype)


def _large_magnitude(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    _check_head_dim(shape)
    # fp16/bf16: |x| up to ~2e4 and outputs up to ~3e4, near fp16's top (65504) without
    # overflowing. float32 keeps 64 (see make_inputs); its float32 range is not at stake.
    scale = 4096.0 if dtype in (torch.float16, torch.bfloat16) else 64.0
    x = sample(shape, dtype, device, generator, "large", large_scale=scale)
    cos, sin = rope_cos_sin(_random_window(shape[2], device, generator, at_end=True), shape[3],
                            dtype)
    return x, cos, sin


def _cancelling_rotation(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    _check_head_dim(shape)
    half = shape[-1] // 2
    cos, sin = rope_cos_sin(_random_window(shape[2], device, generator), shape[3], dtype)
    c, s = cos[:, :half].float(), sin[:, :half].float()
    # x2 = x1·cos/sin makes the first half of the output x1·cos - x2·sin ≈ 0 out of products of
    # ~50-200: half-precision arithmetic leaves an error of ulp(product) ~ 0.03-1 there, the
    # fp32 reference ~1e-5. Where |sin| is small the ratio is not used (x2 = x1).
    x1 = 50.0 * (2 * torch.rand(shape[:-1] + (half,), generator=generator, device=device) - 1)
    ratio = torch.where(s.abs() >= 0.25, c / s.where(s.abs() >= 0.25, 1.0), 1.0)
    x2 = x1 * ratio
    return torch.cat((x1, x2), dim=-1).to(dtype), cos, sin


def _late_positions(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    _check_head_dim(shape)
    x = sample(shape, dtype, device, generator, "normal")
    cos, sin = rope_cos_sin(_random_window(shape[2], device, generator, at_end=True), shape[3],
                            dtype)
    # Descending positions 8191, 8190, ...: a kernel that ignores cos/sin and recomputes them
    # from the row index (assuming positions 0..S-1), or reads them by the wrong row, fails.
    return x, cos.flip(0).contiguous(), sin.flip(0).contiguous()


ADVERSARIAL = (
    AdversarialCase(
        "large_magnitude",
        "|x| up to ~2e4 in fp16/bf16 (outputs near fp16's top) at the last positions of an "
        "8192 context: overflow in a careless intermediate, fp16 math",
        _large_magnitude,
    ),
    AdversarialCase(
        "cancelling_rotation",
        "x2 = x1·cos/sin so x1·cos - x2·sin ≈ 0 from products ~100: half-precision math shows "
        "as an absolute error far above the tolerance",
        _cancelling_rotation,
    ),
    AdversarialCase(
        "late_positions",
        "cos/sin of positions 8191 down to 8192-S (real frequencies, large angles): a kernel "
        "that recomputes cos/sin from the row index or reads them by the wrong row fails",
        _late_positions,
    ),
)


def liger_rotary() -> Callable[..., torch.Tensor] | None:
    """Liger's rope, which rotates q and k together, in place: x goes in as q (so x is
    overwritten; the harness gives every timed call fresh inputs) with a scratch one-head k, the
    least extra work its interface allows."""
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
    except ImportError:
        return None

    def run(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, _ = LigerRopeFunction.apply(x, torch.empty_like(x[:, :1]), cos, sin)
        return q

    return run


ROTARY_MODULE = re.compile(r"rotary|rope", re.IGNORECASE)
# A class that names a bigger block (LlamaAttention, a decoder layer) holds more than RoPE.
NOT_ROTARY_MODULE = re.compile(r"attention|attn|block|layer|decoder|encoder|model",
                               re.IGNORECASE)


def is_rotary_module_name(class_name: str) -> bool:
    """Is a module of this class a rotary embedding on its own (not a block that contains one)?
    The profiler claims such a module's ops, and verify routes it as a module."""
    return bool(ROTARY_MODULE.search(class_name)) and not NOT_ROTARY_MODULE.search(class_name)


def _rotate_half_shape(neg: OpCall, cat: OpCall) -> list[int] | None:
    """The rotated tensor's shape, if neg → cat is concat(-x2, x1) along the last dim."""
    half = arg_shape(neg, 0)
    if not half:
        return None
    dim = arg_value(cat, 1)
    if dim is not None and not is_last_dim(dim, len(half)):
        return None
    # The profiler records a tensor list (cat's input) without shapes; when it has them, check.
    parts = [s for s in cat.shapes if s]
    if len(parts) == 2:
        if half not in parts or parts[0][:-1] != parts[1][:-1]:
            return None
        return parts[0][:-1] + [parts[0][-1] + parts[1][-1]]
    return half[:-1] + [2 * half[-1]]


def _touches(op: OpCall, shape: list[int]) -> bool:
    return any(s == shape for s in op.shapes)


def _find_rotate_half(ctx: Context) -> None:
    seq = significant_unclaimed(ctx)
    j = 0
    while j + 1 < len(seq):
        neg, cat = seq[j], seq[j + 1]
        x = _rotate_half_shape(neg, cat) if (
            neg.name == "aten::neg" and cat.name == "aten::cat") else None
        if x is None:
            j += 1
            continue

        def is_mul(i: int) -> bool:
            return 0 <= i < len(seq) and seq[i].name == "aten::mul" and _touches(seq[i], x)

        def is_add(i: int) -> bool:
            return 0 <= i < len(seq) and seq[i].name == "aten::add" and _touches(seq[i], x)

        if is_mul(j - 1) and is_mul(j + 2) and is_add(j + 3):  # x*cos + rotate_half(x)*sin
            group = seq[j - 1:j + 4]
        elif is_mul(j + 2) and is_mul(j + 3) and is_add(j + 4):  # rotate_half(x)*sin + x*cos
            group = seq[j:j + 5]
        else:
            j += 1
            continue
        site = ctx.site("rotary_embedding", ctx.common_module(group),
                        "rotate_half(aten::mul, aten::neg, aten::cat, aten::mul, aten::add)",
                        four_dims(x), {"layout": "rotate_half"},
                        call_dtype(group[0], ctx.record.dtype))
        ctx.claim(unclaimed_span(ctx, group[0], group[-1]), "rotary_embedding",
                  ("rope", group[0].id), site)
        j += 4


def _find_rotary_modules(ctx: Context) -> None:
    """Ops inside a rotary-embedding module that rotate-half matching left over are RoPE too."""
    for scope, call in ctx.record.module_calls.items():
        info = ctx.record.modules.get(call.path)
        if info is None:
            continue
        name = info.class_name
        if not is_rotary_module_name(name):
            continue
        ops = ctx.in_scope.get(scope, [])
        claimed = [ctx.claims[op.id] for op in ops if op.id in ctx.claims]
        rest = [op for op in ops if op.id not in ctx.claims and ctx.significant(op)]
        rope_claims = [c for c in claimed if c.kernel_type == "rotary_embedding"]
        if not rest and not rope_claims:
            continue
        if rope_claims:
            call_id, site = rope_claims[0].call, rope_claims[0].site
        else:
            biggest = max((s for op in rest for s in op.shapes), key=shape_numel, default=[])
            site = ctx.site("rotary_embedding", call.path, f"{name} module",
                            four_dims(biggest) if biggest else None, {},
                            call_dtype(rest[0], ctx.record.dtype))
            call_id = ("rope-module", scope)
        ctx.claim([op for op in ops if op.id not in ctx.claims], "rotary_embedding", call_id, site)


def _site_route(site: SiteKey, module_type: str | None, modules: Mapping[str, ModuleInfo]) -> str:
    """A rotary module is routed as a module; RoPE inside another module is routed if it is a
    function rope(x, cos, sin) or (q, k, cos, sin) the module calls, not if it is written inline
    (the profile cannot tell)."""
    why = rotary_notes_route(dict(site.notes))
    if why:
        return why
    if module_type is None:
        return UNKNOWN
    return MODULE if is_rotary_module_name(module_type.rsplit(".", 1)[-1]) else FUNCTION


SPEC = OpSpec(
    name="rotary_embedding",
    dims=DIMS,
    reference=reference.rotary_embedding,
    stock=stock_rotary,
    liger=liger_rotary,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=False,
    smoke_shape=(1, 2, 16, 64),
    sweep=(
        (1, 32, 4096, 128),  # LLaMA-2 7B, one 4k sequence
        (2, 32, 2048, 128),
        (4, 8, 1024, 64),
        (1, 40, 2048, 128),  # LLaMA-2 13B
        (8, 32, 512, 128),
        (1, 8, 8192, 128),  # GQA key heads over an 8k context
        (2, 16, 2048, 80),  # head dim 80 (non-power-of-two)
        (4, 12, 1024, 96),  # head dim 96
        (1, 32, 4096, 72),  # head dim 72: half = 36
    ),
    cpu_sweep=(
        (1, 1, 1, 2),
        (1, 2, 7, 64),
        (2, 3, 33, 80),
        (1, 4, 17, 72),
        (2, 2, 64, 128),
        (1, 1, 100, 96),
        (3, 5, 9, 16),
    ),
    edge_shapes=((1, 1, 1, 128), (1, 8, 1023, 128), (3, 5, 4097, 64), (1, 1, 1537, 80),
                 (2, 3, 1023, 2)),
    cpu_edge_shapes=((1, 1, 1, 128), (3, 1, 5, 2), (1, 2, 129, 64), (2, 1, 37, 72)),
    bench_shapes=((1, 32, 4096, 128), (2, 32, 2048, 128), (4, 8, 1024, 64)),
    adversarial=ADVERSARIAL,
    # Rotate-half first: the module rule then reuses its claim as the module's call.
    patterns=(_find_rotate_half, _find_rotary_modules),
    graph_patterns=(find_rotary,),
    site_route=_site_route,
    notes="rotate-half layout (HF LLaMA), cos/sin [S, D] with equal halves, D even; "
    "FLOPs = 3·B·H·S·D; bytes = read x + write out + read cos and sin once.",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate_half_transposed(x: torch.Tensor) -> torch.Tensor:
    """The adjoint of rotate_half: <rotate_half(a), b> = <a, this(b)>."""
    half = x.shape[-1] // 2
    return torch.cat((x[..., half:], -x[..., :half]), dim=-1)


def _rotary_gradient(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    (x, cos, sin), _ = saved_inputs(ctx)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    g, xc = grad.to(compute), x.to(compute)
    grad_x = grad_cos = grad_sin = None
    if ctx.needs_input_grad[0]:
        grad_x = (g * cos.to(compute) + _rotate_half_transposed(g * sin.to(compute))).to(x.dtype)
    if ctx.needs_input_grad[1]:  # cos and sin broadcast over batch and heads
        grad_cos = (g * xc).sum_to_size(cos.shape).to(cos.dtype)
    if ctx.needs_input_grad[2]:
        grad_sin = (g * _rotate_half(xc)).sum_to_size(sin.shape).to(sin.dtype)
    return grad_x, grad_cos, grad_sin


def _rotary_tables(module: nn.Module) -> dict[str, Any] | None:
    if positional_arity(module) != 2:
        return None
    tensors = dict(module.named_buffers(recurse=False))
    tensors.update({n: v for n, v in vars(module).items() if isinstance(v, torch.Tensor)})
    cos = [n for n, t in tensors.items() if "cos" in n.lower() and t.ndim == 2]
    sin = [n for n, t in tensors.items() if "sin" in n.lower() and t.ndim == 2]
    if len(cos) != 1 or len(sin) != 1:
        return None
    c, s = tensors[cos[0]], tensors[sin[0]]
    if c.shape != s.shape or c.shape[-1] % 2 or not c.is_floating_point():
        return None
    return {"tables": (cos[0], sin[0])}


def _computes_rope(module: nn.Module, kernel: RoutedKernel, details: dict[str, Any]) -> bool:
    cos, sin = (getattr(module, n) for n in details["tables"])
    seq_len = min(cos.shape[0], 8)
    q = probe_tensor((1, 2, seq_len, cos.shape[-1]), cos)
    k = probe_tensor((1, 1, seq_len, cos.shape[-1]), cos) * 0.5
    out = module.forward(q, k)
    tables = (cos[:seq_len], sin[:seq_len])
    return (isinstance(out, tuple) and len(out) == 2
            and probe_close(kernel, out[0], kernel.reference(q, *tables))
            and probe_close(kernel, out[1], kernel.reference(k, *tables)))


def _recognize_rotary(module: nn.Module, kernel: RoutedKernel) -> dict[str, Any] | str | None:
    """A rotary module, forward(q, k) → (q, k) with 2-D cos/sin tables, that passes the probe
    (one with position offsets does not)."""
    details = _rotary_tables(module)
    if details is None:
        return None
    if probe_passes(lambda: _computes_rope(module, kernel, details)):
        return details
    return "probe: does not compute q·cos[:S] + rotate_half(q)·sin[:S] (and k)"


def _rotary_inputs(route: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
                   ) -> tuple[Any, ...] | str:
    if len(args) != 2 or kwargs:
        return "arguments"
    cos_name, sin_name = route.details["tables"]
    module = route.module
    return (*args, module_attribute(module, cos_name), module_attribute(module, sin_name))


def _plan_rotary(route: Any, q: Any, k: Any, cos: torch.Tensor, sin: torch.Tensor) -> Plan:
    """q and k rotated by the tables' first S rows (the tables themselves when S is all of
    them: no slice per call)."""
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)) or q.ndim != 4 or \
            k.ndim != 4 or q.shape[-2] != k.shape[-2] or q.shape[-1] != cos.shape[-1] or \
            k.shape[-1] != cos.shape[-1] or q.shape[-2] > cos.shape[0]:
        return "shape"
    seq_len = q.shape[-2]
    # a float32 table would promote q: not ours
    why = call_refusal(route.kernel, q, k, cos[:seq_len], sin[:seq_len])
    if why:
        return why
    call = kernel_caller(route.kernel, q, k, cos, sin)
    whole = seq_len == cos.shape[0]

    def run(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Outcome:
        if not whole:
            cos, sin = cos[:seq_len], sin[:seq_len]
        q_out, why = call(q, cos, sin)
        if why:
            return None, why
        k_out, why = call(k, cos, sin)
        return (None, why) if why else ((q_out, k_out), None)

    return run


INTEGRATION = Integration(
    schema="(Tensor x, Tensor cos, Tensor sin) -> Tensor",
    fake=fake_like_first,
    backward="analytic",
    gradient=_rotary_gradient,
    module_route=ModuleRoute(_recognize_rotary, _rotary_inputs, _plan_rotary,
                             whole_forward=True),
    function_routes=True,  # a model's own rope(x, cos, sin) functions: function_routes.py
    example=(lambda dtype:
             tuple(torch.empty(s, dtype=dtype) for s in ((1, 2, 128, 64), (128, 64), (128, 64)))),
)
