"""Route a model's modules and functional calls to the registered kernels: `patch_model`.

Two ways in, chosen by where PyTorch models call each kernel type:

- Modules, by overriding the instance's `forward` (parameters, state_dict keys, hooks and the
  module tree stay as they are; `unpatch` deletes the override):
  - nn.Linear → matmul: x[..., K] @ Wᵀ + bias, with Wᵀ made contiguous once and cached until the
    weight changes (its storage or version) — not per call. Under autograd (a weight that needs a
    gradient) and under torch.compile the kernel reads Wᵀ as a strided view instead, so gradients
    reach the parameter and no copy is made;
  - nn.RMSNorm and hand-written RMSNorm modules → rmsnorm; nn.LayerNorm → layernorm;
  - SwiGLU MLP modules (three bias-free nn.Linear children, gate/up [H, D] and down [D, H]) →
    fused_mlp;
  - rotary modules, forward(q, k) → (q, k) with 2-D cos/sin tables → rotary_embedding.
  Structure alone does not route a hand-written module: a probe first runs its own forward on
  random inputs against the op's reference, in its own dtype and eps, and only a module that
  computes what the kernel computes is routed (a Gemma-style (1 + weight) norm, a GELU-gated MLP
  or a rotary module with offsets fail the probe and keep their forward).
- Functional calls (F.scaled_dot_product_attention → flash_attention, torch/F/Tensor softmax →
  softmax, F.cross_entropy → cross_entropy, torch/Tensor sum over the last dim → reduce), through
  a TorchFunctionMode entered only inside the modules where the profiler found the calls (the
  plan's call sites; the whole model when none of them exists in it). A mode sees every spelling
  of a call (`F.softmax`, `torch.softmax`, `x.softmax`, a name imported with `from ... import`),
  which rebinding module attributes (`F.softmax = ...`) does not; it is scoped to this model's
  forward, so other models and threads are untouched; Dynamo traces through it, so the routing
  costs nothing under torch.compile; and scoping it to the call sites keeps its per-op Python
  cost in eager mode off the rest of the model.

Every call is routed only where the kernel supports it — a dtype the harness verified, the device
the kernels were built for, no autocast, the parameters it was verified with (causal), shapes it
accepts — and otherwise runs the original code. `PatchReport` counts both, with the reasons.

This file imports only torch (and custom_ops), because `autokernel export` inlines it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from autokernel.integrate.custom_ops import (  # `autokernel export` inlines that module
    BACKWARD_DESCRIPTION,
    KernelOp,
    load_kernel_module,
    register_kernel,
)
from autokernel.interpreter_compat import patch_triton_interpreter  # inlined by export too

DTYPES: dict[str, torch.dtype] = {
    "fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64,
}
MODULE_TYPES = ("matmul", "rmsnorm", "layernorm", "fused_mlp", "rotary_embedding")
FUNCTIONAL_TYPES = ("flash_attention", "softmax", "cross_entropy", "reduce")
EPS_ATTRIBUTES = ("eps", "variance_epsilon", "epsilon")
PROBE_SEED = 1234

Outcome = tuple[Any, str | None]  # (output, None) when routed, (None, why not) otherwise


@dataclass
class RoutedKernel:
    """A registered kernel and what it may be used for (one entry of a run's manifest)."""

    tag: str  # "01_rmsnorm"
    kernel_type: str
    op: KernelOp
    reference: Callable[..., torch.Tensor]  # the op's oracle, for probes
    dtypes: frozenset[torch.dtype]  # dtypes the harness verified
    params: dict[str, Any] = field(default_factory=dict)  # e.g. {"causal": True}
    sites: tuple[str, ...] = ()  # module paths of the profiled calls
    tolerances: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)  # e.g. reduce's minimum sizes

    def __deepcopy__(self, memo: dict[int, Any]) -> RoutedKernel:
        return self  # immutable in use; a copied model shares the registered op

    @classmethod
    def from_manifest(cls, entry: Mapping[str, Any], op: KernelOp,
                      reference: Callable[..., torch.Tensor]) -> RoutedKernel:
        return cls(
            tag=entry["tag"],
            kernel_type=entry["kernel_type"],
            op=op,
            reference=reference,
            dtypes=frozenset(DTYPES[d] for d in entry["dtypes"]),
            params=dict(entry.get("params", {})),
            sites=tuple(entry.get("sites", ())),
            tolerances={DTYPES[d]: (float(a), float(r))
                        for d, (a, r) in entry.get("tolerances", {}).items()},
            limits=dict(entry.get("limits", {})),
        )


@dataclass
class RouteStats:
    """What one kernel got: the modules routed or skipped, and the calls routed or not."""

    tag: str
    kernel_type: str
    backward: str
    modules: list[str] = field(default_factory=list)  # module paths routed ("" = the model)
    scopes: list[str] = field(default_factory=list)  # where functional calls are intercepted
    skipped: dict[str, str] = field(default_factory=dict)  # module path -> why it is not routed
    calls: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)  # reason -> calls left to PyTorch

    def count_call(self) -> None:
        if not torch.compiler.is_compiling():
            self.calls += 1

    def count_fallback(self, reason: str) -> None:
        if not torch.compiler.is_compiling():
            self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1

    def reset_counts(self) -> None:
        self.calls = 0
        self.fallbacks.clear()

    def to_dict(self) -> dict[str, Any]:
        return {
            "tag": self.tag, "kernel_type": self.kernel_type, "backward": self.backward,
            "backward_description": BACKWARD_DESCRIPTION[self.backward],
            "modules": list(self.modules), "scopes": list(self.scopes),
            "skipped": dict(self.skipped), "calls": self.calls,
            "fallbacks": dict(self.fallbacks),
        }

    def summary(self) -> str:
        where = (f"{len(self.modules)} module(s)" if self.kernel_type in MODULE_TYPES
                 else "calls in " + (", ".join(p or "<model>" for p in self.scopes) or "nothing"))
        text = f"{self.tag}: {where}, {self.calls} call(s) routed"
        if self.fallbacks:
            left = sum(self.fallbacks.values())
            reasons = "; ".join(f"{r} ×{n}" for r, n in sorted(self.fallbacks.items()))
            text += f", {left} left to PyTorch ({reasons})"
        return text + f"; {BACKWARD_DESCRIPTION[self.backward]}"


@dataclass
class PatchReport:
    kernels: dict[str, RouteStats]

    def reset_counts(self) -> None:
        for stats in self.kernels.values():
            stats.reset_counts()

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.kernels.values())

    def to_dict(self) -> dict[str, Any]:
        return {tag: stats.to_dict() for tag, stats in self.kernels.items()}

    def lines(self) -> list[str]:
        return [stats.summary() for stats in self.kernels.values()]


# ---------------------------------------------------------------------------------------------
# Checks shared by every route


def _refusal(kernel: RoutedKernel, *tensors: torch.Tensor) -> str | None:
    """Why these tensors cannot go to the kernel (dtype, device, autocast), or None."""
    first = tensors[0]
    for t in tensors:
        if t.dtype != first.dtype:
            return "mixed dtypes"
    if first.dtype not in kernel.dtypes:
        return f"dtype {str(first.dtype).removeprefix('torch.')} not verified"
    device = first.device.type
    if device != kernel.op.device_type or any(t.device != first.device for t in tensors):
        return f"tensors on {device}, kernels built for {kernel.op.device_type}"
    if torch.is_autocast_enabled(device):
        return "autocast"  # the module would run in the autocast dtype, the kernel would not
    return None


def _needs_custom_op(args: tuple[Any, ...]) -> bool:
    """Autograd or the compiler needs the registered op; plain eager inference does not."""
    if torch.compiler.is_compiling():
        return True
    return torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def _call_kernel(kernel: RoutedKernel, *args: Any) -> Outcome:
    """Run the kernel; an input it rejects (ValueError/NotImplementedError) is left to PyTorch."""
    direct = kernel.op.direct
    call = kernel.op.op if direct is None or _needs_custom_op(args) else direct
    try:
        return call(*args), None
    except (ValueError, NotImplementedError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        return None, f"kernel refused: {first[:80]}"


def _only_argument(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    if len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor):
        return args[0]
    if not args and len(kwargs) == 1:
        value = next(iter(kwargs.values()))
        return value if isinstance(value, torch.Tensor) else None
    return None


def _rows(x: torch.Tensor, width: int) -> torch.Tensor:
    return x.reshape(-1, width)


_REQUIRED = object()


def _bind(args: tuple[Any, ...], kwargs: Mapping[str, Any],
          names: tuple[str, ...], defaults: tuple[Any, ...]) -> dict[str, Any] | None:
    """Python's argument binding for a fixed signature; None for a call that does not fit it."""
    if len(args) > len(names) or any(k not in names for k in kwargs):
        return None
    bound = dict(zip(names, defaults))
    bound.update(zip(names, args))
    for k, v in kwargs.items():
        if k in names[: len(args)]:
            return None
        bound[k] = v
    if any(v is _REQUIRED for v in bound.values()):
        return None
    return bound


def _last_dim(dim: Any, ndim: int) -> bool:
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    return isinstance(dim, int) and ndim > 0 and dim in (-1, ndim - 1)


def _unverified(kernel: RoutedKernel, name: str, value: float | None) -> str | None:
    """Why a continuous parameter differs from the one the harness verified the kernel with (a
    tuned kernel may have baked that value in), or None. Unknown to the manifest: any value."""
    if name not in kernel.params:
        return None
    verified = kernel.params[name]
    same = (value is None and verified is None) or (
        value is not None and verified is not None
        and math.isclose(float(value), float(verified), rel_tol=1e-6))
    return None if same else f"{name}={value:g} (verified: {verified})" if value is not None \
        else f"{name} default (verified: {verified})"


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


def _probe_inputs(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    generator = torch.Generator().manual_seed(PROBE_SEED)  # leaves the global RNG alone
    return torch.randn(shape, generator=generator).to(device=like.device, dtype=like.dtype)


def _close(kernel: RoutedKernel, out: Any, ref: torch.Tensor) -> bool:
    """Relative L2 error within the op's rtol for the dtype: scale-free, so a module whose
    outputs happen to be small (a freshly initialized MLP in fp16) is judged like any other."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != ref.dtype:
        return False
    atol, rtol = kernel.tolerances.get(ref.dtype, (1e-2, 1e-2))
    out64, ref64 = out.double(), ref.double()
    scale = ref64.norm().item()
    error = (out64 - ref64).norm().item()
    return error <= (rtol * scale if scale > 0 else atol)


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
# Functional routes: `_<type>_call(kernel, func, args, kwargs)` returns an Outcome


def _sdpa_call(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
               kwargs: Mapping[str, Any]) -> Outcome:
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
    why = _refusal(kernel, q, k, v) or _unverified(kernel, "scale", scale)
    if why:
        return None, why
    return _call_kernel(kernel, q, k, v, causal, None if scale is None else float(scale))


SOFTMAX_SIGNATURES: dict[Any, tuple[tuple[str, ...], tuple[Any, ...]]] = {
    torch.softmax: (("input", "dim", "dtype"), (_REQUIRED, _REQUIRED, None)),
    torch.Tensor.softmax: (("input", "dim", "dtype"), (_REQUIRED, _REQUIRED, None)),
    F.softmax: (("input", "dim", "_stacklevel", "dtype"), (_REQUIRED, None, 3, None)),
}


def _softmax_call(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                  kwargs: Mapping[str, Any]) -> Outcome:
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
                        kwargs: Mapping[str, Any]) -> Outcome:
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
              kwargs: Mapping[str, Any]) -> Outcome:
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


FUNCTIONAL_CALLS: dict[str, tuple[tuple[Any, ...], Callable[..., Outcome]]] = {
    "flash_attention": ((F.scaled_dot_product_attention,), _sdpa_call),
    "softmax": (tuple(SOFTMAX_SIGNATURES), _softmax_call),
    "cross_entropy": ((F.cross_entropy,), _cross_entropy_call),
    "reduce": (tuple(SUM_SIGNATURES), _sum_call),
}


class Router(TorchFunctionMode):
    """Sends intercepted torch functions to kernels; everything else passes straight through."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[Any, list[tuple[RoutedKernel, Callable[..., Outcome], RouteStats]]] = {}

    def add(self, kernel: RoutedKernel, stats: RouteStats) -> None:
        functions, handler = FUNCTIONAL_CALLS[kernel.kernel_type]
        for func in functions:
            self.routes.setdefault(func, []).append((kernel, handler, stats))

    def __deepcopy__(self, memo: dict[int, Any]) -> Router:
        return self  # holds kernels and counters, no model state

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        routes = self.routes.get(func)
        if routes is None:
            return func(*args, **kwargs)
        reason = None
        for kernel, handler, stats in routes:
            out, reason = handler(kernel, func, args, kwargs)
            if reason is None:
                stats.count_call()
                return out
        routes[0][2].count_fallback(reason or "arguments")
        return func(*args, **kwargs)


class _Scope:
    """A module's forward run with the Router active."""

    def __init__(self, module: nn.Module, router: Router) -> None:
        self.module = module
        self.router = router
        self.previous = module.__dict__.get("forward")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.router:
            if self.previous is not None:
                return self.previous(*args, **kwargs)
            return type(self.module).forward(self.module, *args, **kwargs)


# ---------------------------------------------------------------------------------------------
# Patching


def _outermost(paths: Iterable[str]) -> list[str]:
    """Drop every path that lies inside another one ("" is the whole model)."""
    chosen: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("."), p)):
        if not any(path == p or p == "" or path.startswith(p + ".") for p in chosen):
            chosen.append(path)
    return chosen


class Patch:
    """A patched model: its report, and `unpatch()` to give every module its forward back."""

    def __init__(self, model: nn.Module, report: PatchReport) -> None:
        self.model = model
        self.report = report
        self._installed: list[tuple[nn.Module, Any]] = []  # (module, what forward was before)

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


def patch_model(model: nn.Module, kernels: Iterable[RoutedKernel]) -> Patch:
    """Route `model`'s matching modules and calls to `kernels`, in place; see the module doc.

    One kernel per kernel type routes modules or calls (the first given, when a run finished two
    targets of one type, is tried first for functional calls, then the others).
    """
    kernels = list(kernels)
    if any(isinstance(m.__dict__.get("forward"), (_Route, _Scope)) for m in model.modules()):
        raise ValueError("this model is already patched; call unpatch() on its Patch first")
    report = PatchReport({k.tag: RouteStats(k.tag, k.kernel_type, k.op.backward) for k in kernels})
    patch = Patch(model, report)
    by_type: dict[str, RoutedKernel] = {}
    for kernel in kernels:
        by_type.setdefault(kernel.kernel_type, kernel)

    module_types = {t for t in by_type if t in MODULE_TYPES}
    if module_types:
        routed: set[str] = set()
        for path, module in list(model.named_modules()):
            if any(path.startswith(r + ".") for r in routed if r):
                continue  # inside a module whose whole forward is already a kernel
            found = _recognize(module, module_types, by_type)
            if found is None:
                continue
            kernel_type, details = found
            kernel = by_type[kernel_type]
            stats = report.kernels[kernel.tag]
            if isinstance(details, str):
                stats.skipped[path] = details
                continue
            patch._install(module, _Route(module, kernel, stats, MODULE_FORWARDS[kernel_type],
                                          **details))
            stats.modules.append(path)
            if kernel_type == "fused_mlp":
                routed.add(path)

    functional = [k for k in kernels if k.kernel_type in FUNCTIONAL_TYPES]
    if functional:
        router = Router()
        modules = dict(model.named_modules())
        scopes: list[str] = []
        for kernel in functional:
            router.add(kernel, report.kernels[kernel.tag])
            sites = [s for s in kernel.sites if s in modules]
            report.kernels[kernel.tag].scopes = _outermost(sites or [""])
            scopes.extend(report.kernels[kernel.tag].scopes)
        for path in _outermost(scopes):
            patch._install(modules[path], _Scope(modules[path], router))
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
