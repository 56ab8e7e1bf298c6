"""What every route to a kernel shares: the kernels, the counters, the checks and the probes.

`RoutedKernel` is one finished kernel and what it may be used for (a manifest entry: dtypes the
harness verified, parameters, profiled call sites, tolerances); `RouteStats`/`PatchReport` count
the calls each route sent to its kernel and those it left to PyTorch, with the reasons. The
helpers below decide whether one call may go to a kernel (`_refusal`, `_unverified`), call it
(`_call_kernel`: the registered custom op under autograd or the compiler, the plain kernel
function otherwise), bind a torch function's arguments (`_bind`) and judge a probe (`_close`).

The routes themselves live in each op entry's integration section (`autokernel/ops/<type>.py`,
which modules and torch calls go to its kernel), applied by `patch.py`; `function_routes.py` (a
model's own functions, such as a rope(x, cos, sin)) and `attention_chain.py` (explicit
softmax(q·kᵀ)·v) are the two routes that need machinery of their own. This file imports only
torch (and custom_ops), because `autokernel export` inlines it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from autokernel.integrate.custom_ops import (  # `autokernel export` inlines that module
    BACKWARD_DESCRIPTION,
    KernelOp,
    _fitted,
    _kernel_fn_arity,
)
from autokernel.integrate.triton_ops import TRITON_OP
from autokernel.integrate.integration import Integration, Plan
from autokernel.text import count_of, scope_name  # inlined first by `autokernel export`

DTYPES: dict[str, torch.dtype] = {
    "fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64,
}
PROBE_SEED = 1234

Outcome = tuple[Any, str | None]  # (output, None) when routed, (None, why not) otherwise


@dataclass
class RoutedKernel:
    """A registered kernel and what it may be used for (one entry of a run's manifest)."""

    tag: str  # "01_rmsnorm"
    kernel_type: str
    op: KernelOp
    reference: Callable[..., torch.Tensor] | None  # the op's oracle, for probes
    dtypes: frozenset[torch.dtype]  # dtypes the harness verified
    params: dict[str, Any] = field(default_factory=dict)  # e.g. {"causal": True}
    sites: tuple[str, ...] = ()  # module paths of the profiled calls
    tolerances: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)  # e.g. reduce's minimum sizes
    # matmul's "linear" (nn.Linear modules), "batched" or "gemm" (torch.matmul & co.); "" for
    # the other kernel types, and for a matmul of a run made before roles (routed as "linear").
    role: str = ""
    shape: tuple[int, ...] = ()  # the profiled shape it was benchmarked at, in the op's dims
    # Under torch.compile: False (the default of `patch_model`) leaves the call to the code it
    # replaced, so Inductor compiles and fuses the stock ops; True puts the custom op in the
    # graph (on the H100 that lost: its dispatch costs ~140 µs of host time per call in
    # Inductor's code, and the op cannot be fused with its neighbours).
    in_compiled_graphs: bool = False

    def __deepcopy__(self, memo: dict[int, Any]) -> RoutedKernel:
        return self  # immutable in use; a copied model shares the registered op

    @classmethod
    def from_manifest(cls, entry: Mapping[str, Any], op: KernelOp,
                      reference: Callable[..., torch.Tensor] | None) -> RoutedKernel:
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
            role=str(entry.get("role", "")),
            shape=tuple(int(d) for d in entry.get("shape", ())),
        )

    @property
    def integration(self) -> Integration:
        """The op entry's schema, backward and routes (`autokernel/ops/<type>.py`)."""
        if self.op.integration is None:
            raise ValueError(f"{self.tag}: registered without its op entry's integration")
        return self.op.integration

    @property
    def label(self) -> str:
        return f"{self.kernel_type} ({self.role})" if self.role else self.kernel_type


@dataclass
class RouteStats:
    """What one kernel got: the modules routed or skipped, and the calls routed or not."""

    tag: str
    kernel_type: str
    backward: str
    functional: bool = False  # routes torch calls (in scopes), not modules
    modules: list[str] = field(default_factory=list)  # module paths routed ("" = the model)
    scopes: list[str] = field(default_factory=list)  # where functional calls are intercepted
    functions: list[str] = field(default_factory=list)  # the model's own functions, "rope()"
    skipped: dict[str, str] = field(default_factory=dict)  # module path -> why it is not routed
    calls: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)  # reason -> calls left to PyTorch
    # "compile-transparent (triton_op)" or "opaque to torch.compile (custom_op: why)"
    compile_path: str = ""
    in_compiled_graphs: bool = False  # goes into compiled graphs (else left to Inductor)
    # A fused add + norm kernel: the widths of the norm modules it taps (adds of another last
    # dim are never deferred, `residual_norm.defer_add`).
    fused_widths: set[int] = field(default_factory=set)

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
            "functions": list(self.functions),
            "skipped": dict(self.skipped), "calls": self.calls,
            "fallbacks": dict(self.fallbacks), "compile_path": self.compile_path,
            "in_compiled_graphs": self.in_compiled_graphs,
        }

    def summary(self) -> str:
        parts = []
        if self.modules or not (self.functional or self.functions):
            parts.append(count_of(len(self.modules), "module"))
        if self.functions:
            parts.append(", ".join(self.functions))
        if self.functional:
            parts.append("calls in " + (", ".join(scope_name(p) for p in self.scopes)
                                        or "nothing"))
        where = " and ".join(parts)
        text = f"{self.tag}: {where}, {count_of(self.calls, 'call')} routed"
        if self.fallbacks:
            left = sum(self.fallbacks.values())
            reasons = "; ".join(f"{r} ×{n}" for r, n in sorted(self.fallbacks.items()))
            text += f", {left} left to PyTorch ({reasons})"
        text += f"; {BACKWARD_DESCRIPTION[self.backward]}"
        if self.compile_path:
            graphs = "in compiled graphs" if self.in_compiled_graphs else \
                "left to Inductor under torch.compile"
            text += f"; {self.compile_path}, {graphs}"
        return text


@dataclass
class PatchReport:
    kernels: dict[str, RouteStats]
    # Kernels of the run not routed at all in this mode, and why (verify's in-context selection
    # left them out): tag -> reason.
    left_out: dict[str, str] = field(default_factory=dict)

    def reset_counts(self) -> None:
        for stats in self.kernels.values():
            stats.reset_counts()

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.kernels.values())

    def to_dict(self) -> dict[str, Any]:
        return {tag: stats.to_dict() for tag, stats in self.kernels.items()}

    def lines(self) -> list[str]:
        return [stats.summary() for stats in self.kernels.values()] + [
            f"{tag}: not routed: {why}" for tag, why in self.left_out.items()]


# ---------------------------------------------------------------------------------------------
# Checks shared by every route


UNDER_COMPILE = ("inductor", "transparent", "kernels")  # patch_model's choices
LEFT_TO_INDUCTOR = "under torch.compile: left to Inductor"


def in_compiled_graphs(kernel: RoutedKernel, under_compile: str, left_out: frozenset[str]) -> bool:
    """Whether torch.compile puts the kernel into its graphs: "kernels" every kernel,
    "transparent" the triton_ops only, "inductor" none; a tag in `left_out` never."""
    if kernel.tag in left_out:
        return False
    if under_compile == "transparent":
        return kernel.op.compile_path == TRITON_OP
    return under_compile == "kernels"


def _refusal(kernel: RoutedKernel, *tensors: torch.Tensor) -> str | None:
    """Why these tensors cannot go to the kernel (compiling, dtype, device, autocast), or None."""
    if torch.compiler.is_compiling() and not kernel.in_compiled_graphs:
        return LEFT_TO_INDUCTOR
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


def host_code() -> Any:
    """A context for our own eager host code inside a model's forward (a kernel's allocations,
    shape reads and launch; a route's checks): torch-function handling off, so that a Router's
    mode, on for the whole forward when a kernel's call sites include the model itself, does
    not take each of its torch calls and tensor attribute reads through Python (~20 per routed
    call: most of a routed call's host time). Eager only: under torch.compile nothing comes
    here, the registered op is called instead."""
    return torch._C.DisableTorchFunction()


# Argument types that never are, nor hold, a route's stand-in (residual_norm's PendingSum,
# attention_chain's PendingScores, logits_chain's PendingLogits): a call made of these alone
# needs none of the stand-in checks. Nearly every call a Router sees is one (each torch call of
# the model inside its scopes, and each tensor attribute read there).
PLAIN_ARGUMENT_TYPES = frozenset({
    torch.Tensor, nn.Parameter, int, float, bool, complex, str, type(None), type(Ellipsis),
    slice, torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format,
})


def plain_arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> bool:
    """Whether every argument's type is a PLAIN_ARGUMENT_TYPES one (exactly: a subclass of them
    may be anything)."""
    for value in args:
        if type(value) not in PLAIN_ARGUMENT_TYPES:
            return False
    if kwargs:
        for value in kwargs.values():
            if type(value) not in PLAIN_ARGUMENT_TYPES:
                return False
    return True


_RUNNING = [0]  # kernel calls under way: the torch calls of their host code are not the model's


def kernel_running() -> bool:
    """Is a routed kernel running now (its host code, or the Triton interpreter, calling torch)?
    A route that would take any torch call (a deferred add) leaves those alone."""
    return _RUNNING[0] > 0


def _call_kernel(kernel: RoutedKernel, *args: Any) -> Outcome:
    """Run the kernel; an input it rejects (ValueError/NotImplementedError) is left to PyTorch."""
    if kernel.op.direct is None or _needs_custom_op(args):
        return _call_registered(kernel, *args)
    return _call_direct(kernel, *args)


def _call_registered(kernel: RoutedKernel, *args: Any) -> Outcome:
    """The kernel through its registered op: autograd and the compiler see it."""
    if _RECORDER[0] is not None:
        _RECORDER[0].record_bare(kernel, args)
    _RUNNING[0] += 1
    try:
        return kernel.op.op(*args), None
    except (ValueError, NotImplementedError) as exc:
        return None, _kernel_refusal(exc)
    finally:
        _RUNNING[0] -= 1


def _call_direct(kernel: RoutedKernel, *args: Any) -> Outcome:
    """The kernel's plain function, without the dispatcher, with torch-function handling off
    for its host code when a mode is on (a Router's: `host_code`)."""
    if _RECORDER[0] is not None:
        _RECORDER[0].record_bare(kernel, args)
    _RUNNING[0] += 1
    try:
        if torch._C._is_torch_function_mode_enabled():
            with host_code():
                return kernel.op.direct(*args), None  # type: ignore[misc]
        return kernel.op.direct(*args), None  # type: ignore[misc]
    except (ValueError, NotImplementedError) as exc:
        return None, _kernel_refusal(exc)
    finally:
        _RUNNING[0] -= 1


def _kernel_refusal(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"kernel refused: {first[:80]}"


# ---------------------------------------------------------------------------------------------
# A routed call replayed: verify's host cost of the routing per call


class CallRecorder:
    """While on (`recording_calls`), the first routed call of each kernel (by tag) that a route
    can replay alone (a module's forward, a torch call), twice over: `routed[tag]` replays it
    through its route (the route's entry, its plan, the kernel's call), `bare[tag]` calls the
    kernel file's kernel_fn alone on the arguments the route gave it (each of them, for a route
    that calls it more than once: a rotary module's q and k). Timing both gives what the
    routing adds to the kernel's own host time per call."""

    def __init__(self) -> None:
        self.routed: dict[str, Callable[[], Any]] = {}
        self.bare: dict[str, Callable[[], Any]] = {}
        self._launched: dict[str, list[Callable[[], Any]]] = {}  # since the tag's last route

    def begin(self, tag: str) -> None:
        """A route's call starts: the kernel calls recorded from now on are its own."""
        self._launched.pop(tag, None)

    def record_bare(self, kernel: RoutedKernel, args: tuple[Any, ...]) -> None:
        kernel_fn = kernel.op.kernel_fn
        if kernel.tag in self.routed or kernel_fn is None:
            return
        fitted = _fitted(args, _kernel_fn_arity(kernel_fn))
        self._launched.setdefault(kernel.tag, []).append(lambda: kernel_fn(*fitted))

    def record_routed(self, tag: str, replay: Callable[[], Any]) -> None:
        """The route's call that just returned (its kernel calls were recorded meanwhile)."""
        launched = self._launched.pop(tag, [])
        if tag in self.routed or not launched:
            return
        self.routed[tag] = replay
        self.bare[tag] = launched[0] if len(launched) == 1 else \
            (lambda: [launch() for launch in launched])


_RECORDER: list[CallRecorder | None] = [None]


@contextlib.contextmanager
def recording_calls() -> Iterator[CallRecorder]:
    """Record the routed calls made meanwhile (`CallRecorder`); eager calls only (a compiled
    graph runs no route)."""
    recorder = CallRecorder()
    _RECORDER[0] = recorder
    try:
        yield recorder
    finally:
        _RECORDER[0] = None


def record_routed(tag: str, replay: Callable[[], Any]) -> None:
    """A route's entry, after a call it sent to the kernel: its replay, while recording."""
    if _RECORDER[0] is not None:
        _RECORDER[0].record_routed(tag, replay)


def kernel_caller(kernel: RoutedKernel, *tensors: torch.Tensor) -> Callable[..., Outcome]:
    """How a plan calls the kernel for calls of its signature: through the registered op where
    autograd or the compiler needs it (`_needs_custom_op` of these tensors, decided now: grad
    mode and requires_grad are part of the signature), the plain function otherwise."""
    if kernel.op.direct is None or _needs_custom_op(tensors):
        return functools.partial(_call_registered, kernel)
    return functools.partial(_call_direct, kernel)


# ---------------------------------------------------------------------------------------------
# Decisions made once per call signature
#
# A route's checks (dtype, device, shapes, the axis and the parameters it was verified with, the
# module's weight and eps) depend only on what `call_signature` keeps of a call: each tensor's
# shape, strides, dtype, device and requires_grad, and every other argument's value, with the
# grad mode. So a route makes a *plan* the first time it sees a signature: the reason the call
# is left to PyTorch (a str), or a runner that calls the kernel on this call's values with
# nothing left to check (the registered op or the plain function chosen, shapes computed). Each
# later call of that signature pays a dictionary lookup and the runner. Nothing is cached while
# torch.compile traces (Dynamo traces the route's checks instead) or under autocast (whose dtype
# is not in the signature: the checks refuse it), nor for a call holding a value the signature
# cannot stand for (a tensor subclass, an object): those are planned on every call.

Runner = Callable[..., Outcome]  # a Plan that routes: the call's values -> Outcome
MAX_PLANS = 64  # signatures per route; a model that keeps changing shapes plans the rest per call

# Values a signature holds as themselves (with their type: to a route, True is not 1).
SIGNATURE_SCALARS = frozenset({int, float, bool, complex, str, type(None), type(Ellipsis),
                               torch.dtype, torch.device, torch.memory_format, torch.layout})


class _Unsignable(Exception):
    """A value no signature stands for: the call is planned, not looked up."""


def _sequence_signature(value: Any) -> Any:
    if type(value) in (tuple, list, torch.Size) and \
            all(type(v) in SIGNATURE_SCALARS for v in value):
        return (type(value), tuple(value))
    raise _Unsignable


def call_signature(values: tuple[Any, ...],
                   kwargs: Mapping[str, Any] | None = None) -> tuple[Any, ...] | None:
    """What a route's decision on these values (and keyword arguments) depends on, with the grad
    mode; None when one of them is neither a plain tensor (nor Parameter) nor a plain value (or
    a tuple or list of them). Every planned call computes it, so the loop is written out."""
    key: list[Any] = [torch.is_grad_enabled()]
    add = key.append
    try:
        for value in (*values, *kwargs.values()) if kwargs else values:
            kind = type(value)
            if kind is torch.Tensor or kind is nn.Parameter:
                add((value.shape, value.stride(), value.dtype, value.device,
                     value.requires_grad))
            elif kind in SIGNATURE_SCALARS:
                add(kind)
                add(value)
            else:
                add(_sequence_signature(value))
    except (_Unsignable, RuntimeError):  # RuntimeError: a layout without strides (CSR)
        return None
    if kwargs:
        add(tuple(kwargs))  # the keywords' names, in order
    return tuple(key)


def plans_apply() -> bool:
    """Whether calls now may be looked up by signature (see above): not while compiling, not
    under autocast."""
    return not torch.compiler.is_compiling() and not torch._C._is_any_autocast_enabled()


def remember(plans: dict[Any, Plan], key: Any, plan: Plan) -> Plan:
    """Keep `plan` for `key` (None: a call that is planned every time), up to MAX_PLANS."""
    if key is not None and len(plans) < MAX_PLANS:
        plans[key] = plan
    return plan


def planned_call(kernel: RoutedKernel, planner: Callable[..., Plan], plans: dict[Any, Plan],
                 func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                 stats: RouteStats) -> Outcome:
    """A torch call through a call route's plan for its signature (made on first sight):
    `planner(kernel, func, args, kwargs, stats)` gives the plan, a runner `(args, kwargs)` or
    the reason."""
    key = None
    if plans_apply():
        signature = call_signature(args, kwargs)
        if signature is not None:
            key = (func, signature)
    plan = plans.get(key) if key is not None else None
    if plan is None:
        plan = remember(plans, key, planner(kernel, func, args, kwargs, stats))
    if type(plan) is str:
        return None, plan
    return plan(args, kwargs)


def run_planner(planner: Callable[..., Plan]) -> Callable[..., Outcome]:
    """A call route's handler from its planner: plans the one call and runs it (what a caller
    that keeps no plans, or torch.compile's trace, gets)."""

    def handler(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                kwargs: Mapping[str, Any], stats: RouteStats) -> Outcome:
        plan = planner(kernel, func, args, kwargs, stats)
        return (None, plan) if type(plan) is str else plan(args, kwargs)

    handler.__name__ = getattr(planner, "__name__", "handler")
    return handler


def argument_getter(names: tuple[str, ...], args: tuple[Any, ...],
                    name: str) -> Callable[[tuple[Any, ...], Mapping[str, Any]], Any]:
    """Where calls of this signature (these many positional arguments, the same keywords) hold
    argument `name` of a function taking `names`: a getter `(args, kwargs) -> value`, so that a
    runner binds no arguments per call. Only for an argument the call passes."""
    position = names.index(name)
    if position < len(args):
        return lambda args, kwargs: args[position]
    return lambda args, kwargs: kwargs[name]


def module_attribute(module: nn.Module, name: str) -> Any:
    """`getattr(module, name, None)`, without nn.Module.__getattr__'s Python for the common
    cases (a parameter, buffer or child module; a plain attribute such as eps): a routed call
    reads the module's weight and eps on every call."""
    attributes = module.__dict__
    if name in attributes:
        return attributes[name]
    for store in ("_parameters", "_buffers", "_modules"):
        held = attributes.get(store)
        if held is not None and name in held:
            return held[name]
    return getattr(module, name, None)


def _only_argument(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    if len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor):
        return args[0]
    if not args and len(kwargs) == 1:
        value = next(iter(kwargs.values()))
        return value if isinstance(value, torch.Tensor) else None
    return None


def _rows(x: torch.Tensor, width: int) -> torch.Tensor:
    # A 2-D input already is its rows: the same tensor, without the ~1.5 µs of host time a view
    # costs on every routed call.
    if x.dim() == 2 and x.shape[1] == width:
        return x
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


def _one_dim(dim: Any, ndim: int) -> int | None:
    """The one dim a reduction's `dim` argument names, made non-negative; None for none (all
    dims), several, or one out of range."""
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    if not isinstance(dim, int) or isinstance(dim, bool) or not -ndim <= dim < ndim:
        return None
    return dim % ndim


def _verified_over_an_axis(kernel: RoutedKernel) -> bool:
    """Was the kernel verified over a dim that is not the last (its target's `axis` param)?
    Such a kernel passed the harness at (M, N, K > 1) shapes, so it sums/normalizes over any dim
    given the [outer, N, inner] view; a last-dim kernel (and every kernel of a run made before
    axes) is verified at K = 1 only."""
    axis = kernel.params.get("axis", -1)
    return isinstance(axis, int) and axis != -1


def _axis_refusal(kernel: RoutedKernel, axis: int, ndim: int) -> str | None:
    """Why a call over dim `axis` (non-negative) may not go to the kernel, or None."""
    if axis == ndim - 1 or _verified_over_an_axis(kernel):
        return None
    return f"over dim {axis} of {ndim}; the kernel was verified over the last dim only"


def _input_over_one_dim(kernel: RoutedKernel,
                        bound: Mapping[str, Any] | None) -> tuple[torch.Tensor, int] | str:
    """A bound `(input, dim, ...)` call's tensor and the one dim it works over (non-negative),
    or why the call does not go to the kernel."""
    if bound is None:
        return "arguments"
    x = bound["input"]
    if not isinstance(x, torch.Tensor) or x.ndim == 0:
        return "arguments"
    axis = _one_dim(bound["dim"], x.ndim)
    if axis is None:
        return "not over one dim"
    return _axis_refusal(kernel, axis, x.ndim) or (x, axis)


def _axis_view(x: torch.Tensor, axis: int) -> torch.Tensor:
    """x as [outer, N, inner] for an op over dim `axis`: the reference's axis 1 (a view when x's
    dims after and before the axis each merge, a copy otherwise)."""
    shape = x.shape
    return x.reshape(math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))


def over_axis_caller(kernel: RoutedKernel, x: torch.Tensor, axis: int,
                     *trailing: Any) -> Callable[[torch.Tensor], Outcome]:
    """A plan's call of a single-input kernel over dim `axis` of tensors of x's signature:
    `(x) -> Outcome`, on x's rows when that is the last dim (the signature every kernel takes;
    a 2-D x is its rows), else on the [outer, N, inner] view with the axis argument 1.
    `trailing` arguments (reduce's op) follow the axis, which is then passed at the last dim too
    (-1). The output is the kernel's, in the shape of what it was given."""
    call = kernel_caller(kernel, x)
    if axis == x.ndim - 1:
        width, extra = x.shape[-1], ((-1, *trailing) if trailing else ())
        if x.ndim == 2:
            return lambda x: call(x, *extra)
        return lambda x: call(x.reshape(-1, width), *extra)
    shape = x.shape
    view = (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))
    return lambda x: call(x.reshape(view), 1, *trailing)


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


def _attention_scale_unverified(kernel: RoutedKernel, scale: float | None,
                                head_dim: int) -> str | None:
    """Why an attention's scale (None: 1/sqrt(D)) is not the one the harness verified the kernel
    with, compared as the numbers they stand for (a profiled 0.125 is the default at D = 64)."""
    if "scale" not in kernel.params:
        return None
    default = head_dim ** -0.5
    verified = kernel.params["scale"]
    expected = default if verified is None else float(verified)
    actual = default if scale is None else float(scale)
    if math.isclose(actual, expected, rel_tol=1e-5):
        return None
    return f"scale={actual:.4g} (verified: {expected:.4g})"


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


def _probe_passes(check: Callable[[], bool]) -> bool:
    """Run a module probe without autograd; a module that cannot even run it is not ours."""
    with torch.no_grad():
        try:
            return check()
        except Exception:
            return False


# ---------------------------------------------------------------------------------------------
# What module routes ask of a module


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


def _ones_or(tensor: torch.Tensor | None, route: Any, name: str, width: int,
             like: torch.Tensor, fill: float) -> torch.Tensor:
    """The module's affine tensor, or a constant cached on the route when it has none."""
    if tensor is not None:
        return tensor
    key = (name, width, like.dtype, like.device)
    if route.cache.get(name + "_key") != key:
        route.cache[name] = torch.full((width,), fill, dtype=like.dtype, device=like.device)
        route.cache[name + "_key"] = key
    return route.cache[name]
