"""flash_attention: O = softmax(Q Kᵀ · scale [+ causal mask]) V, Q/K/V/O [B, H, S, D].

Shapes are written B x H x S x D. Inputs are (q, k, v, causal, scale); make_inputs takes `causal`
(default True) and `scale` (default None = 1/sqrt(D)) as parameters.

FLOP convention (FlashAttention papers'): non-causal 4·B·H·S²·D (two S x S x D GEMMs, 2 FLOPs
per multiply-add); causal counts only the unmasked half, 2·B·H·S²·D, so TFLOP/s compare directly
with published FA2/FA3 figures. `flops(shape)` assumes the default causal=True; pass
causal=False for the other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from autokernel import reference
from autokernel.integrate.attention_chain import CHAIN_STARTS, MASK_MAKERS, note_mask, start_chain
from autokernel.integrate.custom_ops import fake_like_first
from autokernel.integrate.integration import CallRoute, Integration, Plan
from autokernel.integrate.routing import RoutedKernel, RouteStats
from autokernel.integrate.route_helpers import (
    REQUIRED,
    attention_scale_unverified,
    bind_arguments,
    call_refusal,
    kernel_caller,
)
from autokernel.integrate.plans import argument_runner
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
from autokernel.profiling.callsites import (
    CAST_OPS,
    Context,
    Extracted,
    SiteKey,
    significant_unclaimed,
    unclaimed_span,
)
from autokernel.profiling.site_readers import (
    arg_shape,
    arg_value,
    call_dtype,
    four_dims,
    has_tensor,
    maybe_last_dim,
    shape_numel,
)
from autokernel.profiling.events import ModuleInfo, OpCall
from autokernel.profiling.graph_attention import attention_route, find_explicit_attention, find_sdpa
from autokernel.profiling.site_routes import CALL, CHAIN

# "large" multiplies q and k by this, so logits (q·k/sqrt(D)) are ~N(0, 9²) and softmax rows are
# sharp; v keeps unit scale. Larger is not checkable at fp32's 1e-4: a logit of size L carries
# ~L·2^-24·sqrt(D) absolute rounding error, which exp turns into a relative weight error that
# torch's own fp32 attention shows against fp64 (about 0.9 of the tolerance at logits ~N(0, 30²)).
# Logits past ±88 (where a softmax without its running max overflows) are the "rising_logits"
# adversarial case, built so their size does not cost precision.
LARGE_SCALE = 3.0


def _qkv(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = sample(shape, dtype, device, generator, distribution, large_scale=LARGE_SCALE)
    k = sample(shape, dtype, device, generator, distribution, large_scale=LARGE_SCALE)
    v = sample(shape, dtype, device, generator, distribution, large_scale=1.0)
    return q, k, v


def make_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
    causal: bool = True,
    scale: float | None = None,
    **params: Any,
) -> Inputs:
    if params:
        raise ValueError(
            f"flash_attention takes causal and scale only; got {', '.join(sorted(params))}"
        )
    return (*_qkv(shape, dtype, device, generator, distribution), bool(causal), scale)


def _rising_logits(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    _, _, s, d = shape
    # Logits that climb from ~0 to ~120 along the keys: past 88 a softmax without its running
    # max overflows fp32, and each key block raises the row max again, so the accumulator's
    # rescale runs on every block. Head dim 0 carries the ramp, q = 16 and k_j = a small
    # integer growing with j; the other dims are N(0, 1) rounded to quarters (|x| <= 4). Every
    # product and partial sum is then exact in fp32 (and every input exact in fp16/bf16), so
    # only the final scale multiply rounds: logits this large would otherwise carry
    # ~120 * 2^-24 * sqrt(D) of rounding, about fp32's whole tolerance.
    q, k, v = _qkv(shape, torch.float32, device, generator, "normal")
    q, k = ((t * 4).round().clamp(-16, 16) / 4 for t in (q, k))
    ramp_top = round(120.0 * math.sqrt(d) / 16.0)  # <= 256: exact in bf16
    q[..., 0] = 16.0
    k[..., 0] = (torch.linspace(0.0, 1.0, s, device=device) * ramp_top).round()
    return q.to(dtype), k.to(dtype), v.to(dtype), True, None


def _with_shape(new_shape: Any, causal: bool, scale: float | None = None) -> Any:
    """An adversarial input maker: the normal inputs at new_shape(shape), with causal/scale."""
    def make(shape: Shape, dtype: torch.dtype, device: str | torch.device,
             generator: torch.Generator, distribution: str = "normal", **params: Any) -> Inputs:
        return make_inputs(new_shape(shape), dtype, device, generator, "normal", causal, scale)

    return make


def _bshd_layout(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    b, h, s, d = shape
    q, k, v = _qkv((b, s, h, d), dtype, device, generator, "normal")
    # [B, S, H, D] storage seen as [B, H, S, D]: what a fused QKV projection hands attention.
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True, None


ADVERSARIAL = (
    AdversarialCase(
        "rising_logits",
        "logits ramp from ~0 to ~120 along the keys: overflows fp32 exp without a running max, "
        "and breaks kernels that fix the max on the first key block or skip the rescale",
        _rising_logits,
    ),
    AdversarialCase(
        "causal_ragged",
        "causal with S + 3 tokens: the diagonal key block is also the ragged last block",
        _with_shape(lambda s: (s[0], s[1], s[2] + 3, s[3]), causal=True),
    ),
    AdversarialCase(
        "non_causal_ragged",
        "non-causal with S + 5 tokens: the last key block must be masked without a causal mask",
        _with_shape(lambda s: (s[0], s[1], s[2] + 5, s[3]), causal=False),
    ),
    AdversarialCase(
        "single_query",
        "S = 1: one query, one key, a block that is almost all padding",
        _with_shape(lambda s: (s[0], s[1], 1, s[3]), causal=True),
    ),
    AdversarialCase(
        "head_dim_80",
        "D = 80: the head-dim block is padded to 128 and must be masked on load and store",
        _with_shape(lambda s: (s[0], s[1], s[2], 80), causal=True),
    ),
    AdversarialCase(
        "explicit_scale",
        "scale = 0.3 passed explicitly (not 1/sqrt(D)), non-causal: breaks kernels that ignore it",
        _with_shape(lambda s: s, causal=False, scale=0.3),
    ),
    AdversarialCase(
        "bshd_layout",
        "q, k, v are [B, S, H, D] tensors viewed as [B, H, S, D]: breaks kernels that assume "
        "contiguous inputs",
        _bshd_layout,
    ),
)


def stock(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
    scale: float | None = None,
) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def flops(shape: Shape, causal: bool = True) -> float:
    # QKᵀ and PV are S x S x D GEMMs each: 4·B·H·S²·D non-causal. Causal counts the unmasked
    # half only, 2·B·H·S²·D (the FlashAttention papers' convention; the exact lower triangle,
    # S(S+1)/2 pairs, differs by 1/S).
    b, h, s, d = shape
    return (2.0 if causal else 4.0) * b * h * s * s * d


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    # Q, K, V read once, O written once.
    b, h, s, d = shape
    return 4.0 * b * h * s * d * element_size(dtype)


# (attn_mask index, is_causal index, scale index, q layout) per SDPA entry point.
ATTENTION_OPS: dict[str, tuple[int | None, int | None, int | None, str]] = {
    "aten::scaled_dot_product_attention": (3, 5, 6, "BHSD"),
    "aten::_scaled_dot_product_attention_math": (3, 5, 7, "BHSD"),
    "aten::_scaled_dot_product_flash_attention": (None, 4, 6, "BHSD"),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (5, 4, 6, "BHSD"),
    "aten::_scaled_dot_product_efficient_attention": (3, 6, 7, "BHSD"),
    "aten::_scaled_dot_product_cudnn_attention": (3, 6, 8, "BHSD"),
    "aten::_flash_attention_forward": (None, 8, 10, "BSHD"),
    "aten::_efficient_attention_forward": (3, None, 11, "BSHD"),
    "aten::_cudnn_attention_forward": (3, 6, 8, "BHSD"),
}


def _attention_shape(op: OpCall, ctx: Context) -> Extracted:
    mask_i, causal_i, scale_i, layout = ATTENTION_OPS[op.name]
    q, k = arg_shape(op, 0), arg_shape(op, 1)
    if len(q) < 3:
        return None
    if layout == "BSHD" and len(q) == 4:
        named = {"B": q[0], "H": q[2], "S": q[1], "D": q[3]}
        kv_heads, kv_len = (k[2], k[1]) if len(k) == 4 else (None, None)
    else:
        named = four_dims(q)
        kv_heads = k[-3] if len(k) >= 3 else None
        kv_len = k[-2] if len(k) >= 2 else None
    params: dict[str, Any] = {}
    causal = arg_value(op, causal_i) if causal_i is not None else None
    if isinstance(causal, bool):
        params["causal"] = causal
    if mask_i is not None and has_tensor(op, mask_i):
        params["mask"] = True
    scale = arg_value(op, scale_i) if scale_i is not None else None
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        params["scale"] = scale
    if kv_heads and kv_heads != named["H"]:
        params["kv_heads"] = kv_heads
    if kv_len and kv_len != named["S"]:
        params["kv_len"] = kv_len
    return named, params


ATTENTION_MATMULS = ("aten::matmul", "aten::bmm")


def _makes_a_scalar(op: OpCall) -> bool:
    """torch.full([], v) / scalar_tensor: the scale or mask value, made on the fly."""
    return op.name == "aten::scalar_tensor" or (op.name == "aten::full" and arg_value(op, 0) == [])


def _scalar_value(op: OpCall) -> Any:
    return arg_value(op, 0 if op.name == "aten::scalar_tensor" else 1)


def _find_explicit_attention(ctx: Context) -> None:
    seq = significant_unclaimed(ctx)
    for s, softmax in enumerate(seq):
        if softmax.name not in ("aten::softmax", "aten::_softmax"):
            continue
        p = arg_shape(softmax, 0)
        if len(p) < 3 or not maybe_last_dim(arg_value(softmax, 1), len(p)):
            continue
        # Backwards: casts, a scalar scale and a causal-shaped masked_fill, then Q @ Kᵀ.
        causal = False
        scale: float | None = None
        j = s - 1
        while j >= 0 and seq[j].name not in ATTENTION_MATMULS:
            op = seq[j]
            if op.name in CAST_OPS or _makes_a_scalar(op):
                pass
            elif op.name in ("aten::mul", "aten::div", "aten::mul_", "aten::div_") and not (
                has_tensor(op, 1)
            ):
                value = arg_value(op, 1)
                if value is None and j > 0 and _makes_a_scalar(seq[j - 1]):
                    value = _scalar_value(seq[j - 1])  # scores / torch.full([], sqrt(d))
                if isinstance(value, (int, float)) and value:
                    scale = float(value) if "mul" in op.name else 1.0 / float(value)
            elif op.name in ("aten::masked_fill", "aten::masked_fill_", "aten::where"):
                # masked_fill(scores, mask, value) or where(keep, scores, value)
                mask = arg_shape(op, 0 if op.name == "aten::where" else 1)
                # An [S, S] mask broadcast over batch and heads is the causal triangle; a
                # per-batch padding mask is not something a causal kernel can reproduce.
                if mask[-2:] != p[-2:] or shape_numel(mask[:-2]) != 1:
                    break
                causal = True
            else:
                break
            j -= 1
        if j < 0 or seq[j].name not in ATTENTION_MATMULS:
            continue
        scores = seq[j]
        q, kt = arg_shape(scores, 0), arg_shape(scores, 1)
        if len(q) < 3 or len(kt) < 3 or q[:-1] != p[:-1] or kt[-1] != p[-1] or kt[-2] != q[-1]:
            continue
        # Forwards: casts, then P @ V.
        k = s + 1
        while k < len(seq) and seq[k].name in CAST_OPS:
            k += 1
        if k >= len(seq) or seq[k].name not in ATTENTION_MATMULS:
            continue
        values = seq[k]
        if arg_shape(values, 0) != p or arg_shape(values, 1)[-2:-1] != p[-1:]:
            continue
        params: dict[str, Any] = {"causal": causal}
        if scale is not None:
            params["scale"] = scale
        label = "softmax(QK^T)V(" + ", ".join([scores.name, softmax.name, values.name]) + ")"
        site = ctx.site("flash_attention", ctx.common_module(seq[j:k + 1]), label,
                        four_dims(q), params, call_dtype(scores, ctx.record.dtype))
        ctx.claim(unclaimed_span(ctx, scores, values), "flash_attention",
                  ("attention", scores.id), site)


# The SDPA call's notes and params verify refuses (its kernels take neither).
UNROUTED_SDPA = {"mask": "attn_mask", "kv_heads": "k/v heads differ from q's",
                 "kv_len": "k/v length differs from q's"}


def _site_route(site: SiteKey, module_type: str | None, modules: Mapping[str, ModuleInfo]) -> str:
    """Explicit attention is deferred whole; SDPA is intercepted unless it has what the kernels
    do not take."""
    notes, params = dict(site.notes), dict(site.params)
    if "form" in notes:  # found in the data-flow graph, which says what verify cannot take
        return attention_route(notes, params) or (CHAIN if notes["form"] == "chain" else CALL)
    if site.aten_op.startswith("softmax(QK^T)V"):
        return CHAIN
    notes, params = dict(site.notes), dict(site.params)
    for key, why in UNROUTED_SDPA.items():
        if key in notes or key in params:
            return f"no: {why}"
    return CALL


def _resolved_scale(scale: Any, shape: list[int]) -> float | None:
    """An attention's scale as the number it stands for (None: 1/sqrt(D), D the last dim)."""
    if scale is not None:
        return float(scale)
    return float(shape[-1]) ** -0.5 if shape and shape[-1] > 0 else None


def _scale_mismatch(site_params: Mapping[str, Any], shape: list[int],
                    verified: Mapping[str, Any]) -> str | None:
    """A tuned kernel may bake the scale in: verify refuses another one."""
    if "scale" not in verified:
        return None
    mine = _resolved_scale(site_params.get("scale"), shape)
    theirs = _resolved_scale(verified["scale"], shape)
    if None in (mine, theirs) or math.isclose(mine, theirs, rel_tol=1e-5):
        return None
    return f"no: scale={mine:.4g} (verified: {theirs:.4g})"


SPEC = OpSpec(
    name="flash_attention",
    dims=("B", "H", "S", "D"),
    reference=reference.flash_attention,
    stock=stock,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=True,
    smoke_shape=(1, 2, 48, 64),
    sweep=(
        (1, 32, 2048, 128),
        (4, 32, 1024, 128),
        (2, 12, 1024, 64),     # GPT-2
        (1, 32, 8192, 128),
        (2, 32, 2048, 80),     # Phi-2 head dim
        (2, 16, 3000, 64),     # ragged sequence
        (2, 8, 2048, 256),     # Gemma head dim: the widest kept whole in one program
        (1, 4, 2048, 512),     # a decoder with 4 heads of 512
        (8, 1, 197, 768),      # a ViT-B encoder run as one head of 768, 197 tokens
        (8, 32, 512, 1024),    # KernelBench L1 97_ScaledDotProductAttention's heads (B=32)
    ),
    cpu_sweep=(
        (1, 2, 16, 32),
        (2, 3, 37, 64),
        (1, 2, 64, 128),
        (1, 1, 50, 80),
        (2, 2, 33, 96),
        (3, 1, 21, 32),
        (1, 1, 64, 16),
        (1, 2, 40, 320),       # head dims past 256: the head dim tiled
        (1, 1, 24, 512),
    ),
    edge_shapes=(
        (1, 8, 1023, 128),
        (2, 4, 4097, 64),
        (1, 16, 1537, 80),
        (1, 32, 1, 128),
        (1, 1, 2047, 32),
        (3, 5, 777, 96),
        (1, 3, 1000, 320),
        (2, 2, 333, 1024),
        (1, 4, 1, 512),
    ),
    cpu_edge_shapes=(
        (1, 1, 1, 32),
        (1, 1, 1, 128),
        (2, 1, 63, 80),
        (1, 3, 17, 96),
        (1, 1, 2, 64),
        (1, 1, 1, 1024),
        (2, 1, 19, 768),
    ),
    bench_shapes=((1, 32, 2048, 128), (4, 32, 1024, 128), (1, 32, 4096, 128)),
    adversarial=ADVERSARIAL,
    # SDPA and each backend it dispatches to, whichever the profile records outermost.
    aten_ops={name: AtenRule(_attention_shape) for name in ATTENTION_OPS},
    # Defaults: fp16/bf16 error is dominated by rounding the probabilities to the input dtype
    # before the PV product (what every FlashAttention does), ~1/5 of the tolerance; fp32 with
    # ieee dots sits at ~1/5 of 1e-4 at the "large" distribution's sharp softmax.
    patterns=(_find_explicit_attention,),
    graph_patterns=(find_sdpa, find_explicit_attention),
    site_route=_site_route,
    param_mismatch=_scale_mismatch,
    tolerances=dict(DEFAULT_TOLERANCES),
    notes="FLOPs: causal 2*B*H*S^2*D (unmasked half only, the FlashAttention papers' "
    "convention, comparable to FA2/FA3 figures), non-causal 4*B*H*S^2*D; flops(shape) assumes "
    "causal=True. Bytes 4*B*H*S*D*dtype size. Shapes are BxHxSxD; inputs (q, k, v, causal, "
    "scale), scale None = 1/sqrt(D).",
)


# --- integration: torch only below; `autokernel export` ships this part ---
# How a finished kernel of this type joins a model: its custom op's schema, fake and backward,
# and its routes (autokernel/integrate/integration.py). This part imports nothing itself and
# uses only torch and the integrate modules' names above, because `autokernel export` ships it.


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
          scale: float | None = None) -> torch.Tensor:
    # SDPA's backward never materializes the S×S score matrix the reference builds.
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


SDPA_ARGUMENTS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                  "enable_gqa")
SDPA_DEFAULTS = (REQUIRED, REQUIRED, REQUIRED, None, 0.0, False, None, False)


def _plan_sdpa(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
               kwargs: Mapping[str, Any], _stats: RouteStats) -> Plan:
    bound = bind_arguments(args, kwargs, SDPA_ARGUMENTS, SDPA_DEFAULTS)
    if bound is None:
        return "arguments"
    q, k, v = bound["query"], bound["key"], bound["value"]
    if bound["attn_mask"] is not None:
        return "attn_mask"
    if bound["dropout_p"]:
        return "dropout"
    causal, verified = bool(bound["is_causal"]), bool(kernel.params.get("causal", True))
    if causal != verified:
        return f"is_causal={causal} (verified: {verified})"
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        return "arguments"
    if bound["enable_gqa"] or q.ndim != 4 or q.shape != k.shape or q.shape != v.shape:
        return "q, k, v shapes differ"
    scale = bound["scale"]
    if scale is not None and math.isclose(float(scale), q.shape[-1] ** -0.5, rel_tol=1e-6):
        scale = None  # the default, spelled out
    why = call_refusal(kernel, q, k, v) or attention_scale_unverified(kernel, scale, q.shape[-1])
    if why:
        return why
    call = kernel_caller(kernel, q, k, v)
    scale = None if scale is None else float(scale)
    return argument_runner(call, SDPA_ARGUMENTS, args, SDPA_ARGUMENTS[:3], causal, scale)


INTEGRATION = Integration(
    schema="(Tensor q, Tensor k, Tensor v, bool causal, float? scale) -> Tensor",
    fake=fake_like_first,
    backward="recompute",
    recompute=_sdpa,
    # F.scaled_dot_product_attention, and softmax(q @ kᵀ · scale [mask]) @ v written out
    # (attention_chain.py defers the scores until the chain is known; the comparisons that make
    # a mask from a 0/1 table are watched, so that the mask's kind is known without reading it).
    call_routes={"": (CallRoute((F.scaled_dot_product_attention,), plan=_plan_sdpa),
                      CallRoute(CHAIN_STARTS, start_chain),
                      CallRoute(tuple(MASK_MAKERS), note_mask))},
    example=lambda dtype: (*(torch.empty(1, 2, 128, 64, dtype=dtype) for _ in "qkv"), True, None),
)
