"""Route a model's modules and functional calls to the registered kernels: `patch_model`.

Four ways in, chosen by where PyTorch models call each kernel type:

- Modules, by overriding the instance's `forward` (parameters, state_dict keys, hooks and the
  module tree stay as they are; `unpatch` deletes the override):
  - nn.Linear → the matmul kernel of role "linear": x[..., K] @ Wᵀ + bias, with Wᵀ made
    contiguous once and cached until the weight changes (its storage or version) — not per
    call. Under autograd (a weight that needs a gradient) and under torch.compile the kernel
    reads Wᵀ as a strided view instead, so gradients reach the parameter and no copy is made;
  - nn.RMSNorm and hand-written RMSNorm modules → rmsnorm; nn.LayerNorm → layernorm;
  - SwiGLU MLP modules (three bias-free nn.Linear children, gate/up [H, D] and down [D, H]) →
    fused_mlp;
  - rotary modules, forward(q, k) → (q, k) with 2-D cos/sin tables → rotary_embedding.
  Structure alone does not route a hand-written module: a probe first runs its own forward on
  random inputs against the op's reference, in its own dtype and eps, and only a module that
  computes what the kernel computes is routed (a Gemma-style (1 + weight) norm, a GELU-gated MLP
  or a rotary module with offsets fail the probe and keep their forward).
- Functional calls (F.scaled_dot_product_attention → flash_attention, torch/F/Tensor softmax →
  softmax, F.cross_entropy → cross_entropy, torch/Tensor sum over the last dim → reduce,
  torch.matmul/bmm/`@` with a batched second operand → the matmul kernel of role "batched", with
  a 2-D one (and mm, addmm) → role "gemm"), through a TorchFunctionMode entered only inside the
  modules where the profiler found each kernel's calls (the plan's call sites; the whole model
  when none of them exists in it), and each kernel takes calls only inside its own sites. A mode
  sees every spelling of a call (`F.softmax`, `torch.softmax`, `x.softmax`, `q @ k`, a name
  imported with `from ... import`), which rebinding module attributes (`F.softmax = ...`) does
  not; it is scoped to this model's forward, so other models and threads are untouched; Dynamo
  traces through it, so the routing costs nothing under torch.compile; and scoping it to the
  call sites keeps its per-op Python cost in eager mode off the rest of the model.
- Explicit attention, softmax(q @ kᵀ · scale [causal mask]) @ v written out in torch calls →
  flash_attention, by deferring the scores inside the kernel's scopes (`attention_chain.py`).
- A model's own RoPE function, rope(x, cos, sin) or (q, k, cos, sin), called from the modules
  where the profiler found the rotation → rotary_embedding, by rebinding the function's name
  where the forward looks it up, after a probe (`function_routes.py`).

Every call is routed only where the kernel supports it — a dtype the harness verified, the device
the kernels were built for, no autocast, the parameters it was verified with (causal, scale),
shapes it accepts — and otherwise runs the original code. `PatchReport` counts both, with the
reasons, and names what was found but not routed (a probe that failed, a site with nothing to
route) and why.

This file imports only torch (and the integrate modules above), because `autokernel export`
inlines it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

# `autokernel export` inlines these modules (and drops these imports): plain names only.
from autokernel.integrate.attention_chain import (
    CHAIN_STARTS,
    DEFERRED,
    NOT_MINE,
    follow_chain,
    holds_pending,
    realize_pending,
    start_chain,
)
from autokernel.integrate.custom_ops import load_kernel_module, register_kernel
from autokernel.integrate.function_routes import (
    FunctionRoute,
    RouteUser,
    Slot,
    route_rope_functions,
)
from autokernel.integrate.routing import (  # noqa: F401 - RoutedKernel & co. are this API too
    _REQUIRED,
    DTYPES,
    PROBE_SEED,
    UNDER_COMPILE,
    Outcome,
    PatchReport,
    RoutedKernel,
    RouteStats,
    _attention_scale_unverified,
    _bind,
    _call_kernel,
    _close,
    _last_dim,
    _only_argument,
    _probe_inputs,
    _refusal,
    _rows,
    _unverified,
)
from autokernel.interpreter_compat import patch_triton_interpreter  # inlined by export too

MODULE_TYPES = ("matmul", "rmsnorm", "layernorm", "fused_mlp", "rotary_embedding")
LINEAR_ROLES = ("linear", "")  # "": a matmul kernel of a run made before roles
EPS_ATTRIBUTES = ("eps", "variance_epsilon", "epsilon")

Handler = Callable[[RoutedKernel, Any, tuple[Any, ...], Mapping[str, Any], RouteStats], Outcome]


# ---------------------------------------------------------------------------------------------
# Module routes: each `_<type>_forward(route, args, kwargs)` returns an Outcome


class _Route:
    """A module's forward, sent to a kernel when the call fits and to the original otherwise."""

    def __init__(self, module: nn.Module, kernel: RoutedKernel, stats: RouteStats,
                 call: Callable[..., Outcome], **details: Any) -> None:
        self.module = module
        self.kernel = kernel
        self.stats = stats
        self.call = call
        self.details = details
        self.previous = module.__dict__.get("forward")  # an instance override we sit on
        self.cache: dict[str, Any] = {}

    def original(self, *args: Any, **kwargs: Any) -> Any:
        if self.previous is not None:
            return self.previous(*args, **kwargs)
        return type(self.module).forward(self.module, *args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out, reason = self.call(self, args, kwargs)
        if reason is None:
            self.stats.count_call()
            return out
        self.stats.count_fallback(reason)
        return self.original(*args, **kwargs)


def _linear_forward(route: _Route, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Outcome:
    x = _only_argument(args, kwargs)
    module = route.module
    weight, bias = module.weight, module.bias
    if x is None or x.ndim == 0 or x.shape[-1] != weight.shape[1]:
        return None, "arguments"
    why = _refusal(route.kernel, x, weight, *(() if bias is None else (bias,)))
    if why:
        return None, why
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and weight.requires_grad):
        weight_t = weight.t()  # a view: autograd reaches the parameter, the compiler sees no copy
    else:
        weight_t = _cached_transpose(route, weight)
    out, why = _call_kernel(route.kernel, _rows(x, x.shape[-1]), weight_t)
    if why:
        return None, why
    if bias is not None:
        out = out + bias if torch.is_grad_enabled() else out.add_(bias)
    return out.reshape(*x.shape[:-1], weight.shape[0]), None


def _cached_transpose(route: _Route, weight: torch.Tensor) -> torch.Tensor:
    """Wᵀ, contiguous, made again only when the weight's storage or version changes."""
    key = (weight.data_ptr(), weight._version, weight.dtype, weight.device)
    if route.cache.get("key") != key:
        route.cache["weight_t"] = weight.detach().t().contiguous()
        route.cache["key"] = key
    return route.cache["weight_t"]


def _ones_or(tensor: torch.Tensor | None, route: _Route, name: str, width: int,
             like: torch.Tensor, fill: float) -> torch.Tensor:
    """The module's affine tensor, or a cached constant when it has none."""
    if tensor is not None:
        return tensor
    key = (name, width, like.dtype, like.device)
    if route.cache.get(name + "_key") != key:
        route.cache[name] = torch.full((width,), fill, dtype=like.dtype, device=like.device)
        route.cache[name + "_key"] = key
    return route.cache[name]


def _rmsnorm_forward(route: _Route, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Outcome:
    x = _only_argument(args, kwargs)
    if x is None or x.ndim == 0:
        return None, "arguments"
    module = route.module
    width = x.shape[-1]
    weight = _ones_or(getattr(module, "weight", None), route, "weight", width, x, 1.0)
    if weight.shape != (width,):
        return None, "shape"
    eps = getattr(module, route.details["eps_attribute"])
    if eps is None:  # nn.RMSNorm's default
        eps = torch.finfo(x.dtype).eps
    why = _refusal(route.kernel, x, weight) or _unverified(route.kernel, "eps", eps)
    if why:
        return None, why
    out, why = _call_kernel(route.kernel, _rows(x, width), weight, float(eps))
    return (None, why) if why else (out.reshape(x.shape), None)


def _layernorm_forward(route: _Route, args: tuple[Any, ...],
                       kwargs: Mapping[str, Any]) -> Outcome:
    x = _only_argument(args, kwargs)
    if x is None or x.ndim == 0:
        return None, "arguments"
    module = route.module
    width = x.shape[-1]
    weight = _ones_or(module.weight, route, "weight", width, x, 1.0)
    bias = _ones_or(module.bias, route, "bias", width, x, 0.0)
    if tuple(module.normalized_shape) != (width,):
        return None, "shape"
    why = _refusal(route.kernel, x, weight, bias) or _unverified(route.kernel, "eps", module.eps)
    if why:
        return None, why
    out, why = _call_kernel(route.kernel, _rows(x, width), weight, bias, float(module.eps))
    return (None, why) if why else (out.reshape(x.shape), None)


def _fused_mlp_forward(route: _Route, args: tuple[Any, ...],
                       kwargs: Mapping[str, Any]) -> Outcome:
    x = _only_argument(args, kwargs)
    gate, up, down = (getattr(route.module, n).weight for n in route.details["projections"])
    if x is None or x.ndim == 0 or x.shape[-1] != gate.shape[1]:
        return None, "arguments"
    why = _refusal(route.kernel, x, gate, up, down)
    if why:
        return None, why
    out, why = _call_kernel(route.kernel, _rows(x, x.shape[-1]), gate, up, down)
    return (None, why) if why else (out.reshape(*x.shape[:-1], down.shape[0]), None)


def _rotary_forward(route: _Route, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Outcome:
    if len(args) != 2 or kwargs:
        return None, "arguments"
    q, k = args
    cos_name, sin_name = route.details["tables"]
    cos, sin = getattr(route.module, cos_name), getattr(route.module, sin_name)
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)) or q.ndim != 4 or \
            k.ndim != 4 or q.shape[-2] != k.shape[-2] or q.shape[-1] != cos.shape[-1] or \
            k.shape[-1] != cos.shape[-1] or q.shape[-2] > cos.shape[0]:
        return None, "shape"
    seq_len = q.shape[-2]
    cos, sin = cos[:seq_len], sin[:seq_len]
    why = _refusal(route.kernel, q, k, cos, sin)  # a float32 table would promote q: not ours
    if why:
        return None, why
    q_out, why = _call_kernel(route.kernel, q, cos, sin)
    if why:
        return None, why
    k_out, why = _call_kernel(route.kernel, k, cos, sin)
    return (None, why) if why else ((q_out, k_out), None)


MODULE_FORWARDS: dict[str, Callable[..., Outcome]] = {
    "matmul": _linear_forward,
    "rmsnorm": _rmsnorm_forward,
    "layernorm": _layernorm_forward,
    "fused_mlp": _fused_mlp_forward,
    "rotary_embedding": _rotary_forward,
}


# ---------------------------------------------------------------------------------------------
# Recognizing modules: (kernel type, details) candidates, confirmed by a probe where needed


def _forward_parameters(module: nn.Module) -> list[inspect.Parameter] | None:
    try:
        signature = inspect.signature(type(module).forward)
    except (TypeError, ValueError):
        return None
    return list(signature.parameters.values())[1:]  # without self


def _positional_arity(module: nn.Module) -> int | None:
    """How many positional parameters forward takes, when it takes nothing else."""
    parameters = _forward_parameters(module)
    if parameters is None:
        return None
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind not in plain or p.default is not inspect.Parameter.empty for p in parameters):
        return None
    return len(parameters)


def _plain_linear(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) and type(module).forward is nn.Linear.forward


def _eps_attribute(module: nn.Module) -> str | None:
    for name in EPS_ATTRIBUTES:
        value = getattr(module, name, None)
        if isinstance(value, float) and value >= 0:
            return name
    return None


def _handwritten_rmsnorm(module: nn.Module) -> dict[str, Any] | None:
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 1 or \
            not weight.is_floating_point() or isinstance(getattr(module, "bias", None),
                                                         torch.Tensor):
        return None
    if any(True for _ in module.children()) or _positional_arity(module) != 1:
        return None
    eps_attribute = _eps_attribute(module)
    return None if eps_attribute is None else {"eps_attribute": eps_attribute}


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


def _rotary_tables(module: nn.Module) -> dict[str, Any] | None:
    if _positional_arity(module) != 2:
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



def _probe(module: nn.Module, kernel: RoutedKernel, details: dict[str, Any]) -> bool:
    """Does the module's own forward compute what the kernel computes, on random inputs?"""
    forward = module.forward
    reference = kernel.reference
    with torch.no_grad():
        try:
            if kernel.kernel_type == "rmsnorm":
                weight = module.weight
                x = _probe_inputs((3, weight.shape[0]), weight)
                eps = getattr(module, details["eps_attribute"])
                return _close(kernel, forward(x), reference(x, weight, float(eps)))
            if kernel.kernel_type == "fused_mlp":
                gate, up, down = (getattr(module, n).weight for n in details["projections"])
                x = _probe_inputs((3, gate.shape[1]), gate)
                return _close(kernel, forward(x), reference(x, gate, up, down))
            if kernel.kernel_type == "rotary_embedding":
                cos, sin = (getattr(module, n) for n in details["tables"])
                seq_len = min(cos.shape[0], 8)
                q = _probe_inputs((1, 2, seq_len, cos.shape[-1]), cos)
                k = _probe_inputs((1, 1, seq_len, cos.shape[-1]), cos) * 0.5
                out = forward(q, k)
                tables = (cos[:seq_len], sin[:seq_len])
                return (isinstance(out, tuple) and len(out) == 2
                        and _close(kernel, out[0], reference(q, *tables))
                        and _close(kernel, out[1], reference(k, *tables)))
        except Exception:  # a module that cannot even run the probe is not one of ours
            return False
    return False


def _recognize(module: nn.Module, kernel_types: set[str],
               kernels: Mapping[str, RoutedKernel]) -> tuple[str, dict[str, Any] | str] | None:
    """(kernel type, route details) for a module to route, (kernel type, why not) for a module
    that looks like one but fails its probe, None for anything else."""
    if "matmul" in kernel_types and _plain_linear(module):
        return "matmul", {}
    rms_norm_class = getattr(nn, "RMSNorm", None)
    if rms_norm_class is not None and isinstance(module, rms_norm_class):
        if "rmsnorm" not in kernel_types:
            return None
        if len(module.normalized_shape) != 1:
            return "rmsnorm", "normalizes over more than the last dim"
        return "rmsnorm", {"eps_attribute": "eps"}
    if isinstance(module, nn.LayerNorm):
        if "layernorm" not in kernel_types:
            return None
        if len(module.normalized_shape) != 1:
            return "layernorm", "normalizes over more than the last dim"
        return "layernorm", {}
    if "rmsnorm" in kernel_types:
        details = _handwritten_rmsnorm(module)
        if details is not None:
            if _probe(module, kernels["rmsnorm"], details):
                return "rmsnorm", details
            return "rmsnorm", "probe: does not compute x·rsqrt(mean(x²) + eps)·weight"
    if "fused_mlp" in kernel_types:
        candidates = _swiglu_candidates(module)
        for details in candidates:
            if _probe(module, kernels["fused_mlp"], details):
                return "fused_mlp", details
        if candidates:
            return "fused_mlp", "probe: does not compute down(silu(gate(x)) · up(x))"
    if "rotary_embedding" in kernel_types:
        details = _rotary_tables(module)
        if details is not None:
            if _probe(module, kernels["rotary_embedding"], details):
                return "rotary_embedding", details
            return ("rotary_embedding",
                    "probe: does not compute q·cos[:S] + rotate_half(q)·sin[:S] (and k)")
    return None



# ---------------------------------------------------------------------------------------------
# Functional routes: `_<type>_call(kernel, func, args, kwargs, stats)` returns an Outcome;
# NOT_MINE for a call of another kind (another kernel's, or none), DEFERRED for a stand-in


def _sdpa_call(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
               kwargs: Mapping[str, Any], _stats: RouteStats) -> Outcome:
    bound = _bind(args, kwargs,
                  ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                   "enable_gqa"),
                  (_REQUIRED, _REQUIRED, _REQUIRED, None, 0.0, False, None, False))
    if bound is None:
        return None, "arguments"
    q, k, v = bound["query"], bound["key"], bound["value"]
    if bound["attn_mask"] is not None:
        return None, "attn_mask"
    if bound["dropout_p"]:
        return None, "dropout"
    causal, verified = bool(bound["is_causal"]), bool(kernel.params.get("causal", True))
    if causal != verified:
        return None, f"is_causal={causal} (verified: {verified})"
    if bound["enable_gqa"] or q.ndim != 4 or q.shape != k.shape or q.shape != v.shape:
        return None, "q, k, v shapes differ"
    scale = bound["scale"]
    if scale is not None and math.isclose(float(scale), q.shape[-1] ** -0.5, rel_tol=1e-6):
        scale = None  # the default, spelled out
    why = _refusal(kernel, q, k, v) or _attention_scale_unverified(kernel, scale, q.shape[-1])
    if why:
        return None, why
    return _call_kernel(kernel, q, k, v, causal, None if scale is None else float(scale))


SOFTMAX_SIGNATURES: dict[Any, tuple[tuple[str, ...], tuple[Any, ...]]] = {
    torch.softmax: (("input", "dim", "dtype"), (_REQUIRED, _REQUIRED, None)),
    torch.Tensor.softmax: (("input", "dim", "dtype"), (_REQUIRED, _REQUIRED, None)),
    F.softmax: (("input", "dim", "_stacklevel", "dtype"), (_REQUIRED, None, 3, None)),
}


def _softmax_call(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                  kwargs: Mapping[str, Any], _stats: RouteStats) -> Outcome:
    bound = _bind(args, kwargs, *SOFTMAX_SIGNATURES[func])
    if bound is None:
        return None, "arguments"
    x = bound["input"]
    if not _last_dim(bound["dim"], x.ndim):
        return None, "not over the last dim"
    if bound["dtype"] not in (None, x.dtype):
        return None, "dtype argument"
    if x.numel() == 0:
        return None, "empty"
    why = _refusal(kernel, x)
    if why:
        return None, why
    out, why = _call_kernel(kernel, _rows(x, x.shape[-1]))
    return (None, why) if why else (out.reshape(x.shape), None)


def _cross_entropy_call(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                        kwargs: Mapping[str, Any], _stats: RouteStats) -> Outcome:
    bound = _bind(args, kwargs,
                  ("input", "target", "weight", "size_average", "ignore_index", "reduce",
                   "reduction", "label_smoothing"),
                  (_REQUIRED, _REQUIRED, None, None, -100, None, "mean", 0.0))
    if bound is None:
        return None, "arguments"
    logits, targets = bound["input"], bound["target"]
    if bound["weight"] is not None or bound["size_average"] is not None or \
            bound["reduce"] is not None or bound["label_smoothing"] != 0.0:
        return None, "weight, smoothing or legacy arguments"
    if bound["ignore_index"] != -100 or bound["reduction"] != "mean":
        return None, "ignore_index or reduction"
    if logits.ndim != 2 or targets.ndim != 1 or targets.dtype != torch.int64 or \
            targets.shape[0] != logits.shape[0]:
        return None, "shape"
    why = _refusal(kernel, logits)
    if why:
        return None, why
    out, why = _call_kernel(kernel, logits, targets)
    # F.cross_entropy returns the logits' dtype; the kernel's float32 loss is cast to match.
    return (None, why) if why else (out.to(logits.dtype), None)


SUM_SIGNATURES: dict[Any, tuple[tuple[str, ...], tuple[Any, ...]]] = {
    torch.sum: (("input", "dim", "keepdim", "dtype"), (_REQUIRED, None, False, None)),
    torch.Tensor.sum: (("input", "dim", "keepdim", "dtype"), (_REQUIRED, None, False, None)),
}


def _sum_call(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
              kwargs: Mapping[str, Any], _stats: RouteStats) -> Outcome:
    bound = _bind(args, kwargs, *SUM_SIGNATURES[func])
    if bound is None:
        return None, "arguments"
    x = bound["input"]
    if not isinstance(x, torch.Tensor) or not _last_dim(bound["dim"], x.ndim):
        return None, "not over the last dim"
    if bound["dtype"] not in (None, x.dtype) or not x.is_floating_point():
        return None, "dtype"
    if x.numel() < kernel.limits.get("min_elements", 1) or \
            x.shape[-1] < kernel.limits.get("min_row", 1):
        return None, "smaller than a reduce target"
    why = _refusal(kernel, x)
    if why:
        return None, why
    out, why = _call_kernel(kernel, _rows(x, x.shape[-1]))
    if why:
        return None, why
    out = out.reshape(x.shape[:-1])
    return (out.unsqueeze(-1) if bound["keepdim"] else out), None


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


def _matmul_call(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                 kwargs: Mapping[str, Any], _stats: RouteStats) -> Outcome:
    """A @ B with B batched (role "batched": B has three or more dims, as in attention's Q @ Kᵀ
    and P @ V or bmm) or 2-D (role "gemm": x @ W, mm); the kernel is batched like torch.matmul."""
    names = MATMUL_SIGNATURES[func]
    bound = _bind(args, kwargs, names, (_REQUIRED, _REQUIRED))
    if bound is None:
        return None, "arguments"
    a, b = bound[names[0]], bound[names[1]]
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.ndim < 2 or \
            b.ndim < 2 or (b.ndim >= 3) != (kernel.role == "batched"):
        return None, NOT_MINE
    if a.shape[-1] != b.shape[-2]:
        return None, "shape"
    why = _refusal(kernel, a, b)
    return (None, why) if why else _call_kernel(kernel, a, b)


def _addmm_call(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                kwargs: Mapping[str, Any], _stats: RouteStats) -> Outcome:
    """torch.addmm(bias, x, W) (HF's Conv1D), with beta = alpha = 1: x @ W + bias."""
    bound = _bind(args, kwargs, ("input", "mat1", "mat2", "beta", "alpha"),
                  (_REQUIRED, _REQUIRED, _REQUIRED, 1, 1))
    if bound is None:
        return None, "arguments"
    bias, a, b = bound["input"], bound["mat1"], bound["mat2"]
    if not all(isinstance(t, torch.Tensor) for t in (bias, a, b)) or a.ndim != 2 or b.ndim != 2:
        return None, NOT_MINE
    if bound["beta"] != 1 or bound["alpha"] != 1:
        return None, "beta or alpha"
    why = _refusal(kernel, a, b, bias)
    if why:
        return None, why
    out, why = _call_kernel(kernel, a, b)
    if why:
        return None, why
    return (out + bias if torch.is_grad_enabled() else out.add_(bias)), None


FUNCTIONAL_CALLS: dict[tuple[str, str], tuple[tuple[tuple[Any, ...], Handler], ...]] = {
    ("flash_attention", ""): (((F.scaled_dot_product_attention,), _sdpa_call),
                              (CHAIN_STARTS, start_chain)),
    ("softmax", ""): ((tuple(SOFTMAX_SIGNATURES), _softmax_call),),
    ("cross_entropy", ""): (((F.cross_entropy,), _cross_entropy_call),),
    ("reduce", ""): ((tuple(SUM_SIGNATURES), _sum_call),),
    ("matmul", "batched"): ((BATCHED_FUNCTIONS, _matmul_call),),
    ("matmul", "gemm"): ((GEMM_FUNCTIONS, _matmul_call),
                         ((torch.addmm, torch.Tensor.addmm), _addmm_call)),
}


def routes_calls(kernel: RoutedKernel) -> bool:
    return (kernel.kernel_type, kernel.role) in FUNCTIONAL_CALLS


def routes_modules(kernel: RoutedKernel) -> bool:
    return kernel.kernel_type in MODULE_TYPES and (
        kernel.kernel_type != "matmul" or kernel.role in LINEAR_ROLES)


class Router(TorchFunctionMode):
    """Sends intercepted torch functions to kernels; everything else passes straight through.

    `depth` counts, per kernel tag, the kernel's scopes now running: a kernel takes calls only
    inside its own call sites (and a rope FunctionRoute reads the same counts)."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[Any, list[tuple[RoutedKernel, Handler, RouteStats]]] = {}
        self.depth: dict[str, int] = {}
        self.entered = False  # the mode is on the stack (entered once, by the outermost scope)
        self.chains = False  # an explicit-attention route may hand out stand-ins

    def add(self, kernel: RoutedKernel, stats: RouteStats) -> None:
        for functions, handler in FUNCTIONAL_CALLS[(kernel.kernel_type, kernel.role)]:
            self.chains = self.chains or handler is start_chain
            for func in functions:
                self.routes.setdefault(func, []).append((kernel, handler, stats))

    def __deepcopy__(self, memo: dict[int, Any]) -> Router:
        return self  # holds kernels and counters, no model state

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if self.chains and holds_pending(args, kwargs):
            return follow_chain(func, args, kwargs)
        routes = self.routes.get(func)
        if routes is None:
            return func(*args, **kwargs)
        refused: tuple[RouteStats, str] | None = None
        for kernel, handler, stats in routes:
            if not self.depth.get(kernel.tag):
                continue  # outside this kernel's call sites
            out, reason = handler(kernel, func, args, kwargs, stats)
            if reason is None:
                stats.count_call()
                return out
            if reason == DEFERRED:
                return out
            if reason != NOT_MINE and refused is None:
                refused = (stats, reason)
        if refused is not None:
            refused[0].count_fallback(refused[1])
        return func(*args, **kwargs)


class _Scope:
    """A module's forward run inside some kernels' call sites: their depth counts go up, and
    the Router's mode is entered if these kernels route torch calls and it is not on yet.

    The mode is entered once per Router, by the outermost scope (a mode on the stack twice
    would see every call twice). So one thread at a time runs a patched model with its calls
    routed: a second thread inside the same patched model meanwhile runs them in PyTorch."""

    def __init__(self, module: nn.Module, router: Router, tags: frozenset[str],
                 needs_mode: bool) -> None:
        self.module = module
        self.router = router
        self.tags = tags
        self.needs_mode = needs_mode
        self.previous = module.__dict__.get("forward")

    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.previous is not None:
            return self.previous(*args, **kwargs)
        return type(self.module).forward(self.module, *args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        router = self.router
        for tag in self.tags:
            router.depth[tag] = router.depth.get(tag, 0) + 1
        try:
            if not self.needs_mode or router.entered:
                return self._forward(*args, **kwargs)
            router.entered = True
            try:
                with router:
                    out = self._forward(*args, **kwargs)
            finally:
                router.entered = False
            if router.chains and not torch.compiler.is_compiling():
                out = realize_pending(out, "returned by the forward")
            return out
        finally:
            for tag in self.tags:
                router.depth[tag] -= 1


# ---------------------------------------------------------------------------------------------
# Patching


def _outermost(paths: Iterable[str]) -> list[str]:
    """Drop every path that lies inside another one ("" is the whole model)."""
    chosen: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("."), p)):
        if not any(path == p or p == "" or path.startswith(p + ".") for p in chosen):
            chosen.append(path)
    return chosen


def _inside(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or r == "" or path.startswith(r + ".") for r in roots)


class Patch:
    """A patched model: its report, and `unpatch()` to give every module its forward back."""

    def __init__(self, model: nn.Module, report: PatchReport) -> None:
        self.model = model
        self.report = report
        self.router = Router()
        self._installed: list[tuple[nn.Module, Any]] = []  # (module, what forward was before)
        self._rebound: list[tuple[Slot, FunctionRoute, RouteUser]] = []  # rope functions

    def _install(self, module: nn.Module, forward: Any) -> None:
        self._installed.append((module, module.__dict__.get("forward")))
        module.forward = forward

    def unpatch(self) -> None:
        for module, previous in reversed(self._installed):
            if previous is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = previous
        self._installed.clear()
        for slot, route, user in reversed(self._rebound):
            slot.release(route, user)
        self._rebound.clear()


def _route_modules(patch: Patch, kernels: Mapping[str, RoutedKernel]) -> set[str]:
    """Module routes; returns the paths whose whole forward is now a kernel."""
    report, routed = patch.report, set()
    for path, module in list(patch.model.named_modules()):
        if any(path.startswith(r + ".") for r in routed if r):
            continue  # inside a module whose whole forward is already a kernel
        found = _recognize(module, set(kernels), kernels)
        if found is None:
            continue
        kernel_type, details = found
        kernel = kernels[kernel_type]
        stats = report.kernels[kernel.tag]
        if isinstance(details, str):
            stats.skipped[path] = details
            continue
        patch._install(module, _Route(module, kernel, stats, MODULE_FORWARDS[kernel_type],
                                      **details))
        stats.modules.append(path)
        if kernel_type in ("fused_mlp", "rotary_embedding"):
            routed.add(path)
    return routed


def _route_rope_functions(patch: Patch, kernel: RoutedKernel, whole: set[str],
                          modules: Mapping[str, nn.Module]) -> list[str]:
    """Function routes at the rotary kernel's call sites that no rotary module covers (every
    module of the model when none of the sites exists in it); returns the scope paths."""
    stats = patch.report.kernels[kernel.tag]
    sites = [s for s in kernel.sites if s in modules] or list(modules)
    sites = [s for s in sites if not _inside(s, whole) and not any(
        _inside(m, [s]) for m in stats.modules)]
    if not sites:
        return []
    explicit = any(s in modules for s in kernel.sites)
    done = route_rope_functions(patch.model, sites, kernel, stats, patch.router.depth)
    patch._rebound.extend(done.installed)
    if explicit:  # a profiled site with nothing to route is worth a line; any other module not
        stats.skipped.update(done.skipped)
    for name, paths in done.functions.items():
        stats.functions.append(f"{name} in {', '.join(paths)}")
    return done.scopes


def patch_model(model: nn.Module, kernels: Iterable[RoutedKernel],
                under_compile: str = "inductor") -> Patch:
    """Route `model`'s matching modules and calls to `kernels`, in place; see the module doc.

    One kernel per kernel type routes modules (matmul: the first of role "linear"); every kernel
    whose (type, role) routes torch calls takes them in its own call sites, a call going to the
    first kernel that takes it. `under_compile`: "inductor" (the default) leaves every call to
    the original code while torch.compile traces, so a compiled patched model is the compiled
    original; "kernels" puts the kernels into compiled graphs as custom ops.
    """
    if under_compile not in UNDER_COMPILE:
        raise ValueError(f"under_compile must be one of {', '.join(UNDER_COMPILE)}, "
                         f"not {under_compile!r}")
    kernels = [dataclasses.replace(k, in_compiled_graphs=under_compile == "kernels")
               for k in kernels]
    if any(isinstance(m.__dict__.get("forward"), (_Route, _Scope)) for m in model.modules()):
        raise ValueError("this model is already patched; call unpatch() on its Patch first")
    report = PatchReport({k.tag: RouteStats(k.tag, k.kernel_type, k.op.backward,
                                            functional=routes_calls(k)) for k in kernels})
    patch = Patch(model, report)
    module_kernels: dict[str, RoutedKernel] = {}
    for kernel in kernels:
        if routes_modules(kernel):
            module_kernels.setdefault(kernel.kernel_type, kernel)
        elif not routes_calls(kernel):
            report.kernels[kernel.tag].skipped[""] = f"no route for {kernel.label}"
    whole = _route_modules(patch, module_kernels) if module_kernels else set()

    modules = dict(model.named_modules())
    scopes: dict[str, set[str]] = {}
    mode_tags: set[str] = set()
    for kernel in kernels:
        if not routes_calls(kernel):
            continue
        stats = report.kernels[kernel.tag]
        patch.router.add(kernel, stats)
        sites = [s for s in kernel.sites if s in modules]
        stats.scopes = _outermost(sites or [""])
        mode_tags.add(kernel.tag)
        for path in stats.scopes:
            scopes.setdefault(path, set()).add(kernel.tag)
    rotary = module_kernels.get("rotary_embedding")
    if rotary is not None:
        for path in _outermost(_route_rope_functions(patch, rotary, whole, modules)):
            scopes.setdefault(path, set()).add(rotary.tag)
    for path in sorted(scopes, key=lambda p: (p.count("."), p)):
        tags = frozenset(scopes[path])
        patch._install(modules[path], _Scope(modules[path], patch.router, tags,
                                             needs_mode=bool(tags & mode_tags)))
    return patch


# ---------------------------------------------------------------------------------------------
# From a manifest (what `autokernel.load` and an exported module both hold) to routed kernels


class KernelLoadError(RuntimeError):
    """A kernel cannot be loaded for the requested device; the message is one line."""


def prepare_device(device: str) -> None:
    """Make kernels loaded from now on run on `device`: "cuda", or "cpu" (Triton interpreter)."""
    import os

    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        patch_triton_interpreter()
    elif device == "cuda":
        if os.environ.get("TRITON_INTERPRET") == "1":
            raise KernelLoadError("TRITON_INTERPRET=1 is set, so the kernels would run in the "
                                  "CPU interpreter; unset it, or load for device 'cpu'")
        if not torch.cuda.is_available():
            raise KernelLoadError("no CUDA GPU is visible to torch; load for device 'cpu' to run "
                                  "the kernels in the Triton interpreter")
    else:
        raise KernelLoadError(f"unknown device {device!r}; choose cuda or cpu")


def build_kernels(entries: Iterable[Mapping[str, Any]], sources: Mapping[str, str],
                  references: Mapping[str, Callable[..., torch.Tensor]], device: str,
                  module_prefix: str, filenames: Mapping[str, str] | None = None,
                  ) -> list[RoutedKernel]:
    """Execute each manifest entry's kernel source, register it as a custom op, describe it."""
    prepare_device(device)
    kernels = []
    for entry in entries:
        tag = entry["tag"]
        source = sources[tag]
        filename = (filenames or {}).get(tag) or f"<{module_prefix}:{tag}>"
        try:
            module = load_kernel_module(f"{module_prefix}_{tag}", source, filename)
            kernel_fn = module.kernel_fn
        except Exception as exc:  # a kernel file edited by hand, or a missing dependency
            first = (str(exc).strip().splitlines() or [""])[0]
            raise KernelLoadError(f"the kernel {tag} ({filename}) does not load: "
                                  f"{type(exc).__name__}: {first}") from None
        op = register_kernel(entry["kernel_type"], kernel_fn, source, references)
        kernels.append(RoutedKernel.from_manifest(entry, op, references[entry["kernel_type"]]))
    return kernels
