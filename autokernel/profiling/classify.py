"""Which of the nine kernel types each unit of measured time belongs to, and at what shape.

Classification goes by op and module structure; kernel names are a last resort for kernels the
profiler could not tie to an op. In order:

1. Patterns that span several ops claim them as ONE call of one kernel type:
   - a hand-written RMSNorm module (a 1-D weight, no bias, only pow/mean/add/rsqrt/mul and casts
     inside, no mean subtraction) → rmsnorm;
   - a SwiGLU MLP: linear, linear, silu, mul, linear in a row with gate/up [H, D], down [D, H]
     and no biases (silu(gate(x)) * up(x) → down) → fused_mlp. Anything less (a GELU MLP, a
     biased projection) stays matmul + other;
   - explicit attention, matmul(Q, Kᵀ) → [scale] → [masked_fill/where, [S, S] mask] → softmax →
     matmul(P, V) → flash_attention. With an additive or per-batch mask the pattern is not
     reliable, so its softmax stays a softmax target and its matmuls matmul;
   - rotate-half RoPE (neg → cat between the two muls and the add), and every op inside a module
     whose class is a rotary embedding → rotary_embedding;
   - log_softmax followed by nll_loss → cross_entropy.
2. Otherwise the outermost op in the launch stack that is one of the kernel types' aten ops
   (`OP_RULES`): aten::linear/addmm/mm/bmm/matmul → matmul (in one of three roles, below),
   SDPA and its backends → flash_attention, aten::rms_norm/_fused_rms_norm → rmsnorm,
   aten::layer_norm → layernorm, ...
   Outermost, because the inner ops are an implementation detail: F.rms_norm on CUDA runs
   `vectorized_layer_norm_kernel`, which name-based rules call layernorm.
3. A kernel with no op: cuBLAS/CUTLASS GEMM names (nvjet_*, *gemm*) → matmul, flash/fmha/sdpa →
   flash_attention.
4. Everything else is "other", and stays in the denominator.

Shapes are reported in each kernel type's registry dims (e.g. matmul (B, M, N, K) = (1, M, N, K)
from a linear's input [..., K] and weight [N, K]).

Matmuls are split by role, each role a target of its own with its own shapes, because the shapes
differ by orders of magnitude and so does what a kernel for them must do well:
- "linear": linear layers, aten::linear (nn.Linear, F.linear);
- "batched": batched products, aten::bmm/baddbmm and aten::matmul whose B has batch dims
  (attention's Q @ Kᵀ and P @ V when no attention pattern claimed them), B = the batch;
- "gemm": every other GEMM: x @ W, addmm/mm called directly (HF's Conv1D), mv.
A GEMM kernel the profiler could not tie to an op has no known role; the ranking adds it to the
largest matmul target. When the second operand reaches the op as the transposed view of a
contiguous tensor (Q @ K.transpose(-2, -1), x @ W.t()), the site's `b_transposed` parameter says
so and the harness times that layout.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from autokernel.profiling.events import OpCall, RecordedProfile

OTHER = "other"

CANONICAL_DIMS: dict[str, tuple[str, ...]] = {
    "matmul": ("B", "M", "N", "K"),
    "flash_attention": ("B", "H", "S", "D"),
    "fused_mlp": ("M", "D", "H"),
    "softmax": ("M", "N"),
    "layernorm": ("M", "N"),
    "rmsnorm": ("M", "N"),
    "cross_entropy": ("M", "V"),
    "rotary_embedding": ("B", "H", "S", "D"),
    "reduce": ("M", "N"),
}

# A sum is a reduce target only when it is big enough to be worth a kernel of its own.
REDUCE_MIN_ELEMENTS = 1 << 16
REDUCE_MIN_ROW = 32

PROFILER_DTYPES = {
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "float": "fp32",
    "double": "fp64",
}
# torch.finfo(dtype).eps: what nn.RMSNorm / F.rms_norm use when eps is None.
FINFO_EPS = {"fp16": 0.0009765625, "bf16": 0.0078125, "fp32": 1.1920928955078125e-07,
             "fp64": 2.220446049250313e-16}

# Ops that move no data (views, allocation, no-op dropout): skipped when matching op sequences.
TRANSPARENT_OPS = frozenset({
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::view_as",
    "aten::transpose", "aten::t", "aten::permute", "aten::expand", "aten::expand_as",
    "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::as_strided",
    "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind", "aten::narrow",
    "aten::flatten", "aten::unflatten", "aten::movedim", "aten::detach", "aten::alias",
    "aten::lift_fresh", "aten::dropout", "aten::feature_dropout", "aten::empty",
    "aten::empty_like", "aten::empty_strided", "aten::resolve_conj", "aten::resolve_neg",
})
CAST_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::type_as"})

ATTENTION_KERNEL = re.compile(r"flash|fmha|sdpa|attention", re.IGNORECASE)
GEMM_KERNEL = re.compile(r"^nvjet_|gemm|cutlass|xmma|cublas", re.IGNORECASE)
CONV_KERNEL = re.compile(r"conv|fprop|dgrad|wgrad|implicit", re.IGNORECASE)
ROTARY_MODULE = re.compile(r"rotary|rope", re.IGNORECASE)
NOT_ROTARY_MODULE = re.compile(r"attention|attn|block|layer|decoder|encoder|model",
                               re.IGNORECASE)


MATMUL_ROLES = ("linear", "batched", "gemm")


@dataclass(frozen=True)
class SiteKey:
    """Where and how a kernel type is called: one CallSite of the plan."""

    module: str
    aten_op: str
    shape: tuple[int, ...]  # registry dims; () when the profile did not record shapes
    dtype: str
    params: tuple[tuple[str, Any], ...] = ()  # what the op's input generator takes (eps, causal)
    notes: tuple[tuple[str, Any], ...] = ()  # what else differs from the reference (a bias)
    role: str = ""  # for matmul, one of MATMUL_ROLES: each role is a target of its own


@dataclass
class Attribution:
    """One timed row, classified."""

    kernel_type: str  # one of KERNEL_TYPES, or "other"
    time_us: float
    call: tuple[str, int]  # identifies the call this row is part of, for call counts
    site: SiteKey | None  # None for "other"
    label: str  # the op (or kernel) name a person would recognise


# ---------------------------------------------------------------------------------------------
# Registry dims


@lru_cache(maxsize=None)
def registry_dims(kernel_type: str) -> tuple[str, ...]:
    """The op's registry dims (OpSpec.dims); our canonical names until its spec exists."""
    canonical = CANONICAL_DIMS[kernel_type]
    try:
        from autokernel.ops import get_spec

        dims = tuple(get_spec(kernel_type).dims)
    except (ImportError, AttributeError, KeyError):
        return canonical
    return dims if len(dims) == len(canonical) else canonical


# make_inputs(shape, dtype, device, generator, distribution, ...): the arguments every op takes.
INPUT_MAKER_ARGUMENTS = 5


@lru_cache(maxsize=None)
def input_parameters(kernel_type: str) -> frozenset[str]:
    """What a call site's params may name: the reference's arguments (eps, causal, scale) and
    the op's input generator's own named options (matmul's b_transposed, a layout).

    Everything else the profiler learns about a call site (a linear's bias, a mask) is a note:
    the harness feeds params to the op's input generator, which takes exactly these.
    """
    import inspect

    from autokernel.reference import REFERENCES

    names = set(inspect.signature(REFERENCES[kernel_type]).parameters)
    try:
        from autokernel.ops import get_spec

        maker = inspect.signature(get_spec(kernel_type).make_inputs).parameters.values()
    except (ImportError, AttributeError, KeyError):
        return frozenset(names)
    names |= {p.name for p in list(maker)[INPUT_MAKER_ARGUMENTS:]
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return frozenset(names)


def to_registry_shape(kernel_type: str, named: dict[str, int]) -> tuple[int, ...]:
    canonical = CANONICAL_DIMS[kernel_type]
    dims = registry_dims(kernel_type)
    if set(dims) == set(canonical):
        return tuple(int(named[d]) for d in dims)
    # Same number of dims under other names: they are listed in the reference's argument order,
    # which is the canonical order.
    return tuple(int(named[d]) for d in canonical)


# ---------------------------------------------------------------------------------------------
# Small helpers


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def _shape(op: OpCall, index: int) -> list[int]:
    return list(op.shapes[index]) if index < len(op.shapes) else []


def _arg(op: OpCall, index: int) -> Any:
    return op.args[index] if index < len(op.args) else None


def _has_tensor(op: OpCall, index: int) -> bool:
    return bool(_shape(op, index))


def _dtype(op: OpCall, default: str) -> str:
    for name in op.dtypes:
        if name in PROFILER_DTYPES:
            return PROFILER_DTYPES[name]
    return default


def _rows_and_cols(x: Sequence[int], dim: Any = -1) -> tuple[int, int] | None:
    if not x:
        return None
    d = dim if isinstance(dim, int) else -1
    if not -len(x) <= d < len(x):
        return None
    n = x[d]
    return (_numel(x) // n if n else 0), n


def _maybe_last_dim(dim: Any, ndim: int) -> bool:
    """The last dim, or not recorded (a torch that keeps no scalar-list arguments)."""
    return dim is None or _is_last_dim(dim, ndim)


def _is_last_dim(dim: Any, ndim: int) -> bool:
    if isinstance(dim, list) and len(dim) == 1:
        dim = dim[0]
    return isinstance(dim, int) and dim in (-1, ndim - 1)


def _broadcast_numel(a: Sequence[int], b: Sequence[int]) -> int:
    """Elements of the shape a and b broadcast to (torch.matmul's batch)."""
    ndim = max(len(a), len(b))
    a = [1] * (ndim - len(a)) + list(a)
    b = [1] * (ndim - len(b)) + list(b)
    return _numel([x if y == 1 else y for x, y in zip(a, b)])


def _four_dims(x: Sequence[int]) -> dict[str, int]:
    """[B, H, S, D] from a 4-D tensor; fewer dims get leading ones ([H, S, D] → B = 1)."""
    padded = [1] * (4 - len(x)) + list(x[-4:]) if len(x) < 4 else list(x)
    b = _numel(padded[:-3])
    return {"B": b, "H": padded[-3], "S": padded[-2], "D": padded[-1]}


# ---------------------------------------------------------------------------------------------
# Op rules: aten op → (kernel type, shape extractor)

Extracted = tuple[dict[str, int], dict[str, Any]] | None
Extractor = Callable[[OpCall, "Context"], Extracted]


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
    dim = _arg(op, 1)
    mn = _rows_and_cols(x, dim if isinstance(dim, int) else -1)
    if mn is None:
        return None
    params = {} if dim is None or _is_last_dim(dim, len(x)) else {"dim": dim}
    return {"M": mn[0], "N": mn[1]}, params


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
        m, n = 1, _numel(x)
    else:
        if not _is_last_dim(_arg(op, 1), len(x)):
            return None
        m, n = _numel(x) // x[-1], x[-1]
    if m * n < REDUCE_MIN_ELEMENTS or n < REDUCE_MIN_ROW:
        return None
    return {"M": m, "N": n}, {}


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


# ---------------------------------------------------------------------------------------------
# The profile, indexed


@dataclass
class Claim:
    """A pattern's verdict on a root op call: part of call `call` of `kernel_type` at `site`."""

    kernel_type: str
    call: tuple[str, int]
    site: SiteKey


@dataclass
class Context:
    record: RecordedProfile
    roots: list[OpCall] = field(default_factory=list)  # op calls made by Python code, in order
    root_of: dict[int, int] = field(default_factory=dict)  # op id → its root op id
    timed_roots: set[int] = field(default_factory=set)  # root ops with measured time under them
    claims: dict[int, Claim] = field(default_factory=dict)  # root op id → claim
    position: dict[int, int] = field(default_factory=dict)  # root op id → index in roots
    in_scope: dict[int, list[OpCall]] = field(default_factory=dict)  # module call → root ops
    children: dict[int, list[OpCall]] = field(default_factory=dict)  # op id → its ops, in order

    @classmethod
    def build(cls, record: RecordedProfile) -> Context:
        ctx = cls(record)
        for op in sorted(record.ops.values(), key=lambda o: o.id):
            root = op.id
            parent = op.parent
            while parent is not None and parent in record.ops:
                root = parent
                parent = record.ops[parent].parent
            ctx.root_of[op.id] = root
            if op.parent is not None:
                ctx.children.setdefault(op.parent, []).append(op)
            if root == op.id:
                ctx.position[op.id] = len(ctx.roots)
                ctx.roots.append(op)
                for scope in op.scopes:
                    ctx.in_scope.setdefault(scope, []).append(op)
        for row in record.rows:
            if row.op is not None and row.op in ctx.root_of and row.time_us > 0:
                ctx.timed_roots.add(ctx.root_of[row.op])
        return ctx

    def significant(self, op: OpCall) -> bool:
        """Does this root op do work that a pattern must account for?"""
        if op.name in TRANSPARENT_OPS:
            return False
        # On a GPU an op that launched nothing (a view the list above misses) moves no data.
        return self.record.device == "cpu" or op.id in self.timed_roots

    def module_path(self, op: OpCall) -> str:
        if not op.scopes:
            return ""
        call = self.record.module_calls.get(op.scopes[-1])
        return call.path if call else ""

    def common_module(self, ops: Sequence[OpCall]) -> str:
        common = list(ops[0].scopes)
        for op in ops[1:]:
            n = 0
            while n < min(len(common), len(op.scopes)) and common[n] == op.scopes[n]:
                n += 1
            common = common[:n]
        if not common:
            return ""
        call = self.record.module_calls.get(common[-1])
        return call.path if call else ""

    def module_eps(self, op: OpCall) -> float | None:
        for scope in reversed(op.scopes):
            call = self.record.module_calls.get(scope)
            info = self.record.modules.get(call.path) if call else None
            if info is None:
                continue
            for name in ("eps", "variance_epsilon", "epsilon", "norm_eps"):
                value = info.attrs.get(name)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    return float(value)
            return None
        return None

    def site(self, kernel_type: str, module: str, aten_op: str, named: dict[str, int] | None,
             params: dict[str, Any], dtype: str, role: str = "") -> SiteKey:
        shape = to_registry_shape(kernel_type, named) if named else ()
        arguments = input_parameters(kernel_type)
        kernel_params = {k: v for k, v in params.items() if k in arguments}
        notes = {k: v for k, v in params.items() if k not in arguments}
        return SiteKey(module, aten_op, shape, dtype, tuple(sorted(kernel_params.items())),
                       tuple(sorted(notes.items())), role)

    def claim(self, ops: Sequence[OpCall], kernel_type: str, call: tuple[str, int],
              site: SiteKey) -> None:
        for op in ops:
            self.claims[op.id] = Claim(kernel_type, call, site)


# ---------------------------------------------------------------------------------------------
# Multi-op patterns


def _significant_unclaimed(ctx: Context) -> list[OpCall]:
    return [op for op in ctx.roots if ctx.significant(op) and op.id not in ctx.claims]


def _span(ctx: Context, first: OpCall, last: OpCall) -> list[OpCall]:
    """Every unclaimed root op from first to last, views in between included."""
    between = ctx.roots[ctx.position[first.id]:ctx.position[last.id] + 1]
    return [op for op in between if op.id not in ctx.claims]


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


def _find_handwritten_rmsnorm(ctx: Context) -> None:
    for scope, ops in ctx.in_scope.items():
        call = ctx.record.module_calls.get(scope)
        info = ctx.record.modules.get(call.path) if call else None
        if info is None or len(info.params) != 1:
            continue
        (weight_name, weight_shape), = info.params.items()
        if len(weight_shape) != 1 or "bias" in weight_name:
            continue
        work = [op for op in ops if ctx.significant(op)]
        if not work or any(op.id in ctx.claims for op in ops):
            continue
        names = {op.name for op in work}
        if not names <= RMSNORM_OPS:
            continue  # a subtraction, a variance, anything else: not an RMSNorm
        if "aten::mean" not in names or not names & {"aten::rsqrt", "aten::sqrt",
                                                       "aten::reciprocal"}:
            continue
        if not any(_is_square(op) for op in work):
            continue
        mean = next(op for op in work if op.name == "aten::mean")
        x = _shape(mean, 0)
        if not x or x[-1] != weight_shape[0] or not _maybe_last_dim(_arg(mean, 1), len(x)):
            continue
        params: dict[str, Any] = {}
        eps = ctx.module_eps(mean)
        if eps is None:
            add = next((op for op in work if op.name in ("aten::add", "aten::add_")), None)
            scalar = _arg(add, 1) if add else None
            if isinstance(scalar, float):
                eps = scalar
        if eps is not None:
            params["eps"] = eps
        label = "rmsnorm(" + ", ".join(sorted(names - CAST_OPS)) + ")"
        named = {"M": _numel(x) // x[-1], "N": x[-1]}
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


# ---------------------------------------------------------------------------------------------
# Classifying every row


def _launch_stack(ctx: Context, op_id: int) -> list[OpCall]:
    """The op that launched a row and its enclosing op calls, outermost first."""
    stack = []
    current: int | None = op_id
    while current is not None and current in ctx.record.ops:
        stack.append(ctx.record.ops[current])
        current = ctx.record.ops[current].parent
    stack.reverse()
    return stack


def _classify_by_op(ctx: Context, stack: list[OpCall]) -> tuple[str, OpCall, SiteKey] | None:
    for depth, op in enumerate(stack):
        rule = OP_RULES.get(op.name)
        if rule is None or (rule.root_only and depth > 0):
            continue
        extracted = rule.extract(op, ctx)
        if extracted is None:
            if rule.root_only:
                continue  # e.g. a small sum: not a target
            named, params = None, {}
        else:
            named, params = extracted
        role = rule.role(op, ctx) if rule.role is not None else ""
        site = ctx.site(rule.kernel_type, ctx.module_path(op), op.name, named, params,
                        _dtype(op, ctx.record.dtype), role)
        return rule.kernel_type, op, site
    return None


def classify_profile(record: RecordedProfile) -> list[Attribution]:
    """Classify every timed row of the profile; their times add up to the profile's total."""
    ctx = Context.build(record)
    for find in PATTERNS:
        find(ctx)

    memo: dict[int, tuple[str, tuple[str, int], SiteKey | None, str]] = {}
    attributions: list[Attribution] = []
    for index, row in enumerate(record.rows):
        if row.op is None or row.op not in record.ops:
            kernel_type = classify_kernel_name(row.name)
            if kernel_type is None:
                attributions.append(Attribution(OTHER, row.time_us, ("kernel", index), None,
                                                row.name))
            else:
                # Role unknown (""): the ranking puts it with its kernel type's largest target.
                site = SiteKey("", "(no op recorded)", (), record.dtype,
                               notes=(("kernel", row.name),))
                attributions.append(Attribution(kernel_type, row.time_us, ("kernel", index),
                                                site, row.name))
            continue
        if row.op not in memo:
            root = ctx.root_of.get(row.op, row.op)
            stack = _launch_stack(ctx, row.op)
            if root in ctx.claims:
                claim = ctx.claims[root]
                memo[row.op] = (claim.kernel_type, claim.call, claim.site,
                                claim.site.aten_op)
            else:
                found = _classify_by_op(ctx, stack)
                if found is not None:
                    kernel_type, op, site = found
                    memo[row.op] = (kernel_type, ("op", op.id), site, op.name)
                else:
                    memo[row.op] = (OTHER, ("op", root), None, stack[0].name)
        kernel_type, call, site, label = memo[row.op]
        attributions.append(Attribution(kernel_type, row.time_us, call, site, label))
    return attributions
