"""One aten op, one call of a kernel type: the first nine kernel types' `OP_RULES` (aten op →
kernel type and shape extractor), and the kernel-name rules for kernels the profiler tied to no
op. A later kernel type states its aten ops in its op entry (`OpSpec.aten_ops`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autokernel.profiling.callsites import (
    FINFO_EPS, Context, Extracted, Extractor, _arg, _broadcast_numel, _dtype, _four_dims,
    _has_tensor, _numel, _over_axis, _shape, _single_axis,
)
from autokernel.profiling.events import OpCall

# A sum is a reduce target only when it is big enough to be worth a kernel of its own.
REDUCE_MIN_ELEMENTS = 1 << 16
REDUCE_MIN_ROW = 32

ATTENTION_KERNEL = re.compile(r"flash|fmha|sdpa|attention", re.IGNORECASE)
GEMM_KERNEL = re.compile(r"^nvjet_|gemm|cutlass|xmma|cublas", re.IGNORECASE)
CONV_KERNEL = re.compile(r"conv|fprop|dgrad|wgrad|implicit", re.IGNORECASE)



def _matmul_shape(op: OpCall, ctx: Context) -> Extracted:
    name = op.name
    if name == "aten::linear":
        x, w = _shape(op, 0), _shape(op, 1)
        if not x or len(w) != 2:
            return None
        params = {"bias": True} if _has_tensor(op, 2) else {}
        return {"B": 1, "M": _numel(x[:-1]), "N": w[0], "K": x[-1]}, params
    params = {"b_transposed": True} if _b_is_transposed(op, ctx) else {}
    if name in ("aten::addmm", "aten::_addmm_activation", "aten::mm"):
        a_index = 0 if name == "aten::mm" else 1
        a, b = _shape(op, a_index), _shape(op, a_index + 1)
        if len(a) != 2 or len(b) != 2:
            return None
        if name != "aten::mm":
            params["bias"] = True
        return {"B": 1, "M": a[0], "N": b[1], "K": a[1]}, params
    if name in ("aten::bmm", "aten::baddbmm"):
        a_index = 0 if name == "aten::bmm" else 1
        a, b = _shape(op, a_index), _shape(op, a_index + 1)
        if len(a) != 3 or len(b) != 3:
            return None
        return {"B": a[0], "M": a[1], "N": b[2], "K": a[2]}, params
    if name in ("aten::mv", "aten::addmv"):
        a = _shape(op, 0 if name == "aten::mv" else 1)
        if len(a) != 2:
            return None
        return {"B": 1, "M": a[0], "N": 1, "K": a[1]}, {}
    if name == "aten::matmul":
        a, b = _shape(op, 0), _shape(op, 1)
        if not a or not b:
            return None
        if len(b) == 1:
            return {"B": 1, "M": _numel(a[:-1]), "N": 1, "K": b[0]}, {}
        if len(b) == 2:  # x @ W: every leading dim of x is a row of one GEMM
            return {"B": 1, "M": _numel(a[:-1]), "N": b[1], "K": b[0]}, params
        m = a[-2] if len(a) >= 2 else 1
        batch = _broadcast_numel(a[:-2], b[:-2])
        return {"B": batch, "M": m, "N": b[-1], "K": b[-2]}, params
    return None


def _is_column_major(strides: Any) -> bool:
    return (isinstance(strides, list) and len(strides) >= 2
            and all(isinstance(s, int) for s in strides) and strides[-2] == 1 and strides[-1] != 1)


def _swaps_last_two(view: OpCall, b: list[int]) -> bool:
    """Is `view` (transpose/t/permute) the op that made B by swapping its last two dims?"""
    x = _shape(view, 0)
    if len(x) != len(b) or len(b) < 2 or x[:-2] + [x[-1], x[-2]] != b:
        return False
    ndim = len(x)
    if view.name == "aten::t":
        return True
    if view.name == "aten::transpose":
        dims = [_arg(view, 1), _arg(view, 2)]
        if all(isinstance(d, int) for d in dims):
            return sorted(d % ndim for d in dims) == [ndim - 2, ndim - 1]
        return x[-1] != x[-2]  # arguments not recorded: the shapes alone must tell
    if view.name == "aten::permute":
        order = _arg(view, 1)
        return isinstance(order, list) and [d % ndim for d in order] == (
            list(range(ndim - 2)) + [ndim - 1, ndim - 2])
    return False


def _b_is_transposed(op: OpCall, ctx: Context) -> bool:
    """Did B reach the op as the transposed view of a contiguous tensor (Q @ Kᵀ, x @ W.t())?

    aten::matmul records B's strides on the as_strided inside its own expand of B; otherwise
    the view op just before the product, in program order, shows it.
    """
    b = _shape(op, 2 if op.name in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm")
               else 1)
    if len(b) < 2 or b[-1] == 1:
        return False
    for child in ctx.children.get(op.id, []):
        if child.name == "aten::expand" and _shape(child, 0) == b:
            inner = ctx.children.get(child.id, [])
            if inner and inner[0].name == "aten::as_strided":
                return _is_column_major(_arg(inner[0], 2))
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
    if op.name == "aten::matmul" and len(_shape(op, 1)) >= 3:
        return "batched"
    return "gemm"


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
    q, k = _shape(op, 0), _shape(op, 1)
    if len(q) < 3:
        return None
    if layout == "BSHD" and len(q) == 4:
        named = {"B": q[0], "H": q[2], "S": q[1], "D": q[3]}
        kv_heads, kv_len = (k[2], k[1]) if len(k) == 4 else (None, None)
    else:
        named = _four_dims(q)
        kv_heads = k[-3] if len(k) >= 3 else None
        kv_len = k[-2] if len(k) >= 2 else None
    params: dict[str, Any] = {}
    causal = _arg(op, causal_i) if causal_i is not None else None
    if isinstance(causal, bool):
        params["causal"] = causal
    if mask_i is not None and _has_tensor(op, mask_i):
        params["mask"] = True
    scale = _arg(op, scale_i) if scale_i is not None else None
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        params["scale"] = scale
    if kv_heads and kv_heads != named["H"]:
        params["kv_heads"] = kv_heads
    if kv_len and kv_len != named["S"]:
        params["kv_len"] = kv_len
    return named, params


def _softmax_shape(op: OpCall, ctx: Context) -> Extracted:
    x = _shape(op, 0)
    if not x:
        return None
    dim = _arg(op, 1)
    axis = len(x) - 1 if dim is None else _single_axis(dim, len(x))  # None: not recorded
    if axis is None:
        return None
    return _over_axis(x, axis)


def _norm_width(op: OpCall) -> int | None:
    normalized = _arg(op, 1)
    if isinstance(normalized, list) and normalized and all(isinstance(d, int) for d in normalized):
        return _numel(normalized)
    weight = _shape(op, 2)
    if weight:
        return _numel(weight)
    x = _shape(op, 0)
    return x[-1] if x else None


def _layernorm_shape(op: OpCall, ctx: Context) -> Extracted:
    x, n = _shape(op, 0), _norm_width(op)
    if not x or not n:
        return None
    params: dict[str, Any] = {}
    eps = _arg(op, 4)
    if isinstance(eps, (int, float)) and not isinstance(eps, bool):
        params["eps"] = eps
    # Names the reference's arguments do not use, so these stay notes.
    params["elementwise_affine"] = _has_tensor(op, 2)
    params["with_bias"] = _has_tensor(op, 3)
    return {"M": _numel(x) // n, "N": n}, params


def _rmsnorm_shape(op: OpCall, ctx: Context) -> Extracted:
    x, n = _shape(op, 0), _norm_width(op)
    if not x or not n:
        return None
    eps = _arg(op, 3)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        eps = ctx.module_eps(op)
    if eps is None:  # F.rms_norm's default
        eps = FINFO_EPS.get(_dtype(op, ctx.record.dtype))
    params: dict[str, Any] = {"eps": eps} if eps is not None else {}
    if not _has_tensor(op, 2):
        params["elementwise_affine"] = False
    return {"M": _numel(x) // n, "N": n}, params


def _cross_entropy_shape(op: OpCall, ctx: Context) -> Extracted:
    x = _shape(op, 0)
    if not x:
        return None
    v = x[1] if len(x) >= 2 else x[0]
    params: dict[str, Any] = {}
    reduction = _arg(op, 3)
    if isinstance(reduction, int):
        params["reduction"] = {0: "none", 1: "mean", 2: "sum"}.get(reduction, reduction)
    ignore_index = _arg(op, 4)
    if isinstance(ignore_index, int):
        params["ignore_index"] = ignore_index
    smoothing = _arg(op, 5)
    if isinstance(smoothing, float) and smoothing:
        params["label_smoothing"] = smoothing
    if _has_tensor(op, 2):
        params["class_weights"] = True
    return {"M": _numel(x) // v, "V": v}, params


def _reduce_shape(op: OpCall, ctx: Context) -> Extracted:
    x = _shape(op, 0)
    if not x:
        return None
    if len(op.shapes) <= 2:  # aten::sum(self, dtype): the whole tensor
        named: dict[str, int] = {"M": 1, "N": _numel(x)}
        params: dict[str, Any] = {}
    else:
        axis = _single_axis(_arg(op, 1), len(x))
        if axis is None:  # several dims: not one row-wise sum
            return None
        named, params = _over_axis(x, axis)
    if _numel(x) < REDUCE_MIN_ELEMENTS or named["N"] < REDUCE_MIN_ROW:
        return None
    return named, params


@dataclass(frozen=True)
class OpRule:
    kernel_type: str
    extract: Extractor
    root_only: bool = False  # e.g. the sum inside aten::mean is not a sum the model asked for
    role: Callable[[OpCall, Context], str] | None = None  # kernel types with several roles


MATMUL_RULE = OpRule("matmul", _matmul_shape, role=_matmul_role)
ATTENTION_RULE = OpRule("flash_attention", _attention_shape)
OP_RULES: dict[str, OpRule] = {
    **{name: MATMUL_RULE for name in (
        "aten::linear", "aten::addmm", "aten::_addmm_activation", "aten::mm", "aten::bmm",
        "aten::baddbmm", "aten::matmul", "aten::mv", "aten::addmv")},
    **{name: ATTENTION_RULE for name in ATTENTION_OPS},
    "aten::softmax": OpRule("softmax", _softmax_shape),
    "aten::_softmax": OpRule("softmax", _softmax_shape),
    "aten::layer_norm": OpRule("layernorm", _layernorm_shape),
    "aten::native_layer_norm": OpRule("layernorm", _layernorm_shape),
    "aten::rms_norm": OpRule("rmsnorm", _rmsnorm_shape),
    "aten::_fused_rms_norm": OpRule("rmsnorm", _rmsnorm_shape),
    "aten::cross_entropy_loss": OpRule("cross_entropy", _cross_entropy_shape),
    "aten::sum": OpRule("reduce", _reduce_shape, root_only=True),
}


def classify_kernel_name(name: str) -> str | None:
    """The kernel type a device kernel's name alone implies, for kernels with no op."""
    if ATTENTION_KERNEL.search(name):
        return "flash_attention"
    if GEMM_KERNEL.search(name) and not CONV_KERNEL.search(name):
        return "matmul"
    return None
