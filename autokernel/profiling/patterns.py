"""Patterns that span several ops and claim them as ONE call of one kernel type (see
`classify.py`'s docstring for the list): the first nine kernel types' `PATTERNS`, run in this
order, before any later op entry's `OpSpec.patterns`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from autokernel.profiling.callsites import (
    CAST_OPS, Context, _arg, _dtype, _four_dims, _has_tensor, _is_last_dim, _maybe_last_dim,
    _numel, _over_axis, _shape, _significant_unclaimed, _single_axis, _span,
)
from autokernel.profiling.events import OpCall

ROTARY_MODULE = re.compile(r"rotary|rope", re.IGNORECASE)
NOT_ROTARY_MODULE = re.compile(r"attention|attn|block|layer|decoder|encoder|model",
                               re.IGNORECASE)


def _is_square(op: OpCall) -> bool:
    if op.name == "aten::pow":
        return _arg(op, 1) == 2
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
    """A module of pow/mean/add/rsqrt-or-sqrt/div-or-mul with one 1-D weight (over the last dim),
    or with no parameters at all, over any one dim (KernelBench's RMSNorm over NCHW channels)."""
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
        x = _shape(mean, 0)
        if not x:
            continue
        dim = _arg(mean, 1)
        axis = len(x) - 1 if dim is None else _single_axis(dim, len(x))  # None: not recorded
        if axis is None or (weight_shape is not None and (
                axis != len(x) - 1 or x[-1] != weight_shape[0])):
            continue
        named, params = _over_axis(x, axis)
        if weight_shape is None:
            params["elementwise_affine"] = False
        eps = ctx.module_eps(mean)
        if eps is None:
            add = next((op for op in work if op.name in ("aten::add", "aten::add_")), None)
            scalar = _arg(add, 1) if add else None
            if isinstance(scalar, float):
                eps = scalar
        if eps is not None:
            params["eps"] = eps
        label = "rmsnorm(" + ", ".join(sorted(names - CAST_OPS)) + ")"
        site = ctx.site("rmsnorm", call.path, label, named, params,
                        _dtype(work[0], ctx.record.dtype))
        ctx.claim(ops, "rmsnorm", ("rmsnorm-module", scope), site)


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


ATTENTION_MATMULS = ("aten::matmul", "aten::bmm")


def _makes_a_scalar(op: OpCall) -> bool:
    """torch.full([], v) / scalar_tensor: the scale or mask value, made on the fly."""
    return op.name == "aten::scalar_tensor" or (op.name == "aten::full" and _arg(op, 0) == [])


def _scalar_value(op: OpCall) -> Any:
    return _arg(op, 0 if op.name == "aten::scalar_tensor" else 1)


def _find_explicit_attention(ctx: Context) -> None:
    seq = _significant_unclaimed(ctx)
    for s, softmax in enumerate(seq):
        if softmax.name not in ("aten::softmax", "aten::_softmax"):
            continue
        p = _shape(softmax, 0)
        if len(p) < 3 or not _maybe_last_dim(_arg(softmax, 1), len(p)):
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
                _has_tensor(op, 1)
            ):
                value = _arg(op, 1)
                if value is None and j > 0 and _makes_a_scalar(seq[j - 1]):
                    value = _scalar_value(seq[j - 1])  # scores / torch.full([], sqrt(d))
                if isinstance(value, (int, float)) and value:
                    scale = float(value) if "mul" in op.name else 1.0 / float(value)
            elif op.name in ("aten::masked_fill", "aten::masked_fill_", "aten::where"):
                # masked_fill(scores, mask, value) or where(keep, scores, value)
                mask = _shape(op, 0 if op.name == "aten::where" else 1)
                # An [S, S] mask broadcast over batch and heads is the causal triangle; a
                # per-batch padding mask is not something a causal kernel can reproduce.
                if mask[-2:] != p[-2:] or _numel(mask[:-2]) != 1:
                    break
                causal = True
            else:
                break
            j -= 1
        if j < 0 or seq[j].name not in ATTENTION_MATMULS:
            continue
        scores = seq[j]
        q, kt = _shape(scores, 0), _shape(scores, 1)
        if len(q) < 3 or len(kt) < 3 or q[:-1] != p[:-1] or kt[-1] != p[-1] or kt[-2] != q[-1]:
            continue
        # Forwards: casts, then P @ V.
        k = s + 1
        while k < len(seq) and seq[k].name in CAST_OPS:
            k += 1
        if k >= len(seq) or seq[k].name not in ATTENTION_MATMULS:
            continue
        values = seq[k]
        if _shape(values, 0) != p or _shape(values, 1)[-2:-1] != p[-1:]:
            continue
        params: dict[str, Any] = {"causal": causal}
        if scale is not None:
            params["scale"] = scale
        label = "softmax(QK^T)V(" + ", ".join([scores.name, softmax.name, values.name]) + ")"
        site = ctx.site("flash_attention", ctx.common_module(seq[j:k + 1]), label,
                        _four_dims(q), params, _dtype(scores, ctx.record.dtype))
        ctx.claim(_span(ctx, scores, values), "flash_attention", ("attention", scores.id), site)


def _rotate_half_shape(neg: OpCall, cat: OpCall) -> list[int] | None:
    """The rotated tensor's shape, if neg → cat is concat(-x2, x1) along the last dim."""
    half = _shape(neg, 0)
    if not half:
        return None
    dim = _arg(cat, 1)
    if dim is not None and not _is_last_dim(dim, len(half)):
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
    seq = _significant_unclaimed(ctx)
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
                        _four_dims(x), {"layout": "rotate_half"},
                        _dtype(group[0], ctx.record.dtype))
        ctx.claim(_span(ctx, group[0], group[-1]), "rotary_embedding", ("rope", group[0].id), site)
        j += 4


def _find_rotary_modules(ctx: Context) -> None:
    """Ops inside a rotary-embedding module that rotate-half matching left over are RoPE too."""
    for scope, call in ctx.record.module_calls.items():
        info = ctx.record.modules.get(call.path)
        if info is None:
            continue
        name = info.class_name
        if not ROTARY_MODULE.search(name) or NOT_ROTARY_MODULE.search(name):
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
            biggest = max((s for op in rest for s in op.shapes), key=_numel, default=[])
            site = ctx.site("rotary_embedding", call.path, f"{name} module",
                            _four_dims(biggest) if biggest else None, {},
                            _dtype(rest[0], ctx.record.dtype))
            call_id = ("rope-module", scope)
        ctx.claim([op for op in ops if op.id not in ctx.claims], "rotary_embedding", call_id, site)


def _find_log_softmax_nll(ctx: Context) -> None:
    seq = _significant_unclaimed(ctx)
    for j, log_softmax in enumerate(seq):
        if log_softmax.name not in ("aten::log_softmax", "aten::_log_softmax"):
            continue
        x = _shape(log_softmax, 0)
        if not x or not _maybe_last_dim(_arg(log_softmax, 1), len(x)):
            continue
        k = j + 1
        while k < len(seq) and seq[k].name in CAST_OPS:
            k += 1
        if k >= len(seq) or seq[k].name not in ("aten::nll_loss", "aten::nll_loss_nd"):
            continue
        nll = seq[k]
        logits = _shape(nll, 0)
        if _numel(logits) != _numel(x) or (logits and logits[-1] != x[-1]):
            continue
        from autokernel.ops.cross_entropy import _cross_entropy_shape

        extracted = _cross_entropy_shape(nll, ctx)
        if extracted is None:
            continue
        named, params = extracted
        site = ctx.site("cross_entropy", ctx.common_module([log_softmax, nll]),
                        f"{log_softmax.name} + {nll.name}", named, params,
                        _dtype(log_softmax, ctx.record.dtype))
        ctx.claim(_span(ctx, log_softmax, nll), "cross_entropy", ("ce", log_softmax.id), site)


PATTERNS: tuple[Callable[[Context], None], ...] = (
    _find_handwritten_rmsnorm,
    _find_swiglu,
    _find_explicit_attention,
    _find_rotate_half,
    _find_rotary_modules,
    _find_log_softmax_nll,
)
