"""A model's own RoPE function routed to the rotary_embedding kernel: `rope(x, cos, sin)`.

Models often apply rotary embeddings through a plain function called from the attention module's
forward, with no rotary module to route: Mistral's reference code and many ports write
`q, k = rope(q, cos, sin), rope(k, cos, sin)`, HF writes `apply_rotary_pos_emb(q, k, cos, sin)`.
The profiler finds the rotation's ops (neg → cat between the muls and the add) inside that
attention module and names it as the call site. Here the functions that a site module's forward
calls by name are looked up where the forward would find them (the globals of its file, or
methods of its class; functions those functions call, one level down), and one is routed when

- its required arguments are (x, cos, sin) → x' or (q, k, cos, sin) → (q', k'),
- its code, or code it calls, concatenates (rotate-half cannot do without a cat),
- a probe on random inputs in the model's dtype finds it computes x·cos + rotate_half(x)·sin
  with cos/sin tables [S, D], [1, S, D] or [1, 1, S, D] (each layout is probed; a call is
  routed only with tables of a layout that passed, and x [B, H, S, D]).

The name is then rebound, where it was found, to a `FunctionRoute`: calls made while one of the
kernel's site modules runs its forward go to the kernel, and every other call (another model
built from the same file, another thread outside the scope, arguments the probe did not cover)
runs the function itself. `unpatch` binds the function back. RoPE written inline in a forward
(`q * cos + rotate_half(q) * sin`) is no call of its own and cannot be routed; the report says so.

This file imports only torch (and routing), because `autokernel export` inlines it.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from autokernel.integrate.routing import Outcome, RouteStats, RoutedKernel
from autokernel.integrate.route_helpers import call_kernel, call_refusal, probe_close, probe_tensor

CONCATENATIONS = frozenset({"cat", "concat", "concatenate"})
TABLE_RANKS = (2, 3, 4)  # cos/sin as [S, D], [1, S, D], [1, 1, S, D]
PROBE_SEQ = 8
DEFAULT_HEAD_DIM = 16
FOREIGN_MODULES = ("torch", "triton", "numpy", "math", "functools", "builtins")


@dataclass(frozen=True)
class RopeForm:
    """How a function takes its arguments, and the table layouts it was probed with."""

    names: tuple[str, ...]  # the required parameters in order: (x, cos, sin) or (q, k, cos, sin)
    ranks: frozenset[int]  # table ranks with which it computes the kernel's rotation

    @property
    def pair(self) -> bool:
        return len(self.names) == 4


@dataclass
class Slot:
    """Where a function is looked up from a forward: a module file's globals or an instance."""

    name: str
    namespace: dict[str, Any] | None = None  # a file's globals
    owner: nn.Module | None = None  # or a module instance, for a method of its class

    def current(self) -> Any:
        if self.namespace is not None:
            return self.namespace.get(self.name)
        return self.owner.__dict__.get(self.name)  # type: ignore[union-attr]

    def install(self, route: FunctionRoute) -> None:
        if self.namespace is not None:
            self.namespace[self.name] = route
        else:
            self.owner.__dict__[self.name] = route  # type: ignore[union-attr]

    def release(self, route: FunctionRoute, user: RouteUser) -> None:
        """One patch is done with the route; the last one gives the name its function back
        (unless someone rebound the name since: then nothing here calls the route again)."""
        if user in route.users:
            route.users.remove(user)
        if route.users or self.current() is not route:
            return
        if self.namespace is not None:
            self.namespace[self.name] = route.original
        else:
            del self.owner.__dict__[self.name]  # type: ignore[union-attr]


@dataclass(frozen=True, eq=False)
class RouteUser:
    """One patched model's claim on a function route: its kernel, counters and scope depths."""

    kernel: RoutedKernel
    stats: RouteStats
    depth: dict[str, int]  # kernel tag -> how many of its scopes are running (the patch's Router)


class FunctionRoute:
    """Stands in for a model's rope function. A call made inside the scopes of a patched model
    that uses it (its site modules' forwards) goes to that model's kernel when it fits; every
    other call runs the function. Two models built from one file share the route."""

    def __init__(self, original: Callable[..., Any], form: RopeForm) -> None:
        self.original = original
        self.form = form
        self.users: list[RouteUser] = []
        self.signature = inspect.signature(original)
        self.__wrapped__ = original  # inspect.unwrap and help() see the model's function
        self.__name__ = getattr(original, "__name__", "rope")
        self.__doc__ = getattr(original, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for user in self.users:
            if user.depth.get(user.kernel.tag):
                out, reason = self._route(user.kernel, args, kwargs)
                if reason is None:
                    user.stats.count_call()
                    return out
                user.stats.count_fallback(reason)
                break
        return self.original(*args, **kwargs)

    def _arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any] | None:
        names = self.form.names
        if not kwargs and len(args) == len(names):  # the common call, and Dynamo-friendly
            return list(args)
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return None
        if set(bound.arguments) != set(names):  # an optional argument the probe did not try
            return None
        return [bound.arguments[n] for n in names]

    def _route(self, kernel: RoutedKernel, args: tuple[Any, ...],
               kwargs: Mapping[str, Any]) -> Outcome:
        values = self._arguments(args, kwargs)
        if values is None or not all(isinstance(v, torch.Tensor) for v in values):
            return None, "arguments"
        *xs, cos, sin = values
        seq_dim = xs[0].shape[-2:]
        if cos.ndim not in self.form.ranks or sin.shape != cos.shape or \
                any(d != 1 for d in cos.shape[:-2]):
            return None, f"cos/sin of shape {list(cos.shape)}"
        if any(x.ndim != 4 or x.shape[-2:] != seq_dim for x in xs) or cos.shape[-2:] != seq_dim:
            return None, "shape"
        cos, sin = cos.reshape(seq_dim), sin.reshape(seq_dim)
        why = call_refusal(kernel, *xs, cos, sin)  # a float32 table would promote x: not ours
        if why:
            return None, why
        outs = []
        for x in xs:
            out, why = call_kernel(kernel, x, cos, sin)
            if why:
                return None, why
            outs.append(out)
        return (tuple(outs) if self.form.pair else outs[0]), None


# ---------------------------------------------------------------------------------------------
# Finding the functions a forward calls


def _code_names(code: types.CodeType) -> set[str]:
    """Every global or attribute name the code (and the code nested in it) refers to."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _code_names(constant)
    return names


def _model_function(value: Any) -> types.FunctionType | None:
    """The plain Python function behind `value`, when it is the model's own code."""
    if isinstance(value, staticmethod):
        value = value.__func__
    try:  # through functools.wraps, and through a FunctionRoute another patch installed
        value = inspect.unwrap(value)
    except ValueError:
        return None
    if not isinstance(value, types.FunctionType):
        return None
    if (value.__module__ or "").split(".")[0] in FOREIGN_MODULES:
        return None
    return value


def _concatenates(function: types.FunctionType) -> bool:
    """Does the function, or a function of its file that it calls, concatenate tensors?"""
    names = _code_names(function.__code__)
    if names & CONCATENATIONS:
        return True
    for name in names:
        called = _model_function(function.__globals__.get(name))
        if called is not None and _code_names(called.__code__) & CONCATENATIONS:
            return True
    return False


def _required_names(function: Callable[..., Any]) -> tuple[str, ...] | None:
    """The required positional parameters, when every other parameter has a default."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    required = []
    for p in parameters:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is p.empty:
            if p.kind == p.KEYWORD_ONLY:
                return None
            required.append(p.name)
    return tuple(required) if len(required) in (3, 4) else None


@dataclass(frozen=True)
class Candidate:
    slot: Slot
    call: Callable[..., Any]  # what the forward calls: the function, or the bound method
    function: types.FunctionType  # its code


def rope_candidates(module: nn.Module) -> list[Candidate]:
    """Functions the module's forward calls by name, nearest first: its file's functions and its
    class's methods, then the file functions those call."""
    forward = _model_function(type(module).forward)
    if forward is None:
        return []
    found: list[Candidate] = []
    seen: set[tuple[int, str]] = set()
    frontier = [forward]
    for level in range(2):
        following = []
        for caller in frontier:
            for name in sorted(_code_names(caller.__code__)):
                if level == 0 and name not in module.__dict__:
                    method = _model_function(inspect.getattr_static(type(module), name, None))
                    if method is not None:
                        if (id(module), name) not in seen:
                            seen.add((id(module), name))
                            found.append(Candidate(Slot(name, owner=module),
                                                   getattr(module, name), method))
                        continue
                function = _model_function(caller.__globals__.get(name))
                key = (id(caller.__globals__), name)
                if function is None or key in seen:
                    continue
                seen.add(key)
                found.append(Candidate(Slot(name, namespace=caller.__globals__),
                                       caller.__globals__[name], function))
                following.append(function)
        frontier = following
    return found


# ---------------------------------------------------------------------------------------------
# Probing


def _probe_tables(seq: int, dim: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables as models build them: the angles of each half repeated (HF layout)."""
    angles = probe_tensor((seq, dim // 2), like).float()
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(like.dtype), angles.sin().to(like.dtype)


def probe_rope_function(function: Callable[..., Any], names: tuple[str, ...], kernel: RoutedKernel,
          like: torch.Tensor) -> RopeForm | None:
    """The form with which `function` computes the kernel's rotation on random inputs, if any."""
    shape = kernel.shape
    dim = shape[-1] if len(shape) == 4 and shape[-1] % 2 == 0 else DEFAULT_HEAD_DIM
    q = probe_tensor((1, 2, PROBE_SEQ, dim), like)
    k = probe_tensor((1, 1, PROBE_SEQ, dim), like) * 0.5
    cos, sin = _probe_tables(PROBE_SEQ, dim, like)
    reference = kernel.reference
    ranks = set()
    with torch.no_grad():
        for rank in TABLE_RANKS:
            layout = (1,) * (rank - 2) + (PROBE_SEQ, dim)
            tables = (cos.reshape(layout), sin.reshape(layout))
            try:
                if len(names) == 4:
                    out = function(q, k, *tables)
                    ok = (isinstance(out, (tuple, list)) and len(out) == 2
                          and probe_close(kernel, out[0], reference(q, cos, sin))
                          and probe_close(kernel, out[1], reference(k, cos, sin)))
                else:
                    ok = probe_close(kernel, function(q, *tables), reference(q, cos, sin))
            except Exception:  # a function that cannot take these inputs is not one of ours
                ok = False
            if ok:
                ranks.add(rank)
    return RopeForm(names, frozenset(ranks)) if ranks else None


def _floating_like(module: nn.Module, model: nn.Module) -> torch.Tensor:
    """A tensor with the dtype and device the module computes in, for the probe's inputs."""
    for owner in (module, model):
        for tensor in (*owner.parameters(), *owner.buffers()):
            if tensor.is_floating_point():
                return tensor
    return torch.empty(0)


@dataclass
class FunctionRoutes:
    """What `route_rope_functions` did: the routes installed, where, and why not elsewhere."""

    installed: list[tuple[Slot, FunctionRoute, RouteUser]] = field(default_factory=list)
    scopes: list[str] = field(default_factory=list)  # module paths whose forwards call them
    functions: dict[str, list[str]] = field(default_factory=dict)  # "rope()" -> paths
    skipped: dict[str, str] = field(default_factory=dict)  # path -> why not


def route_rope_functions(model: nn.Module, paths: Iterable[str], kernel: RoutedKernel,
                         stats: RouteStats, depth: dict[str, int]) -> FunctionRoutes:
    """Route the rope functions the forwards of the modules at `paths` call (see the doc)."""
    modules = dict(model.named_modules())
    done = FunctionRoutes()
    forms: dict[int, RopeForm | None] = {}  # by function, probed once
    claimed: set[tuple[int, str]] = set()  # slots this patch uses, once each
    user = RouteUser(kernel, stats, depth)
    for path in paths:
        module = modules[path]
        like = _floating_like(module, model)
        found = False
        rejected = []
        for candidate in rope_candidates(module):
            slot, call = candidate.slot, candidate.call
            names = _required_names(call)
            if names is None or not _concatenates(candidate.function):
                continue
            if id(candidate.function) not in forms:
                forms[id(candidate.function)] = probe_rope_function(call, names, kernel, like)
            form = forms[id(candidate.function)]
            if form is None:
                rejected.append(slot.name)
                continue
            key = (id(slot.namespace if slot.namespace is not None else slot.owner), slot.name)
            if key not in claimed:
                claimed.add(key)
                route = slot.current()
                if not isinstance(route, FunctionRoute):
                    route = FunctionRoute(call, form)
                    slot.install(route)
                route.users.append(user)
                done.installed.append((slot, route, user))
            done.functions.setdefault(f"{slot.name}()", []).append(path)
            found = True
        if found:
            done.scopes.append(path)
        elif rejected:
            done.skipped[path] = (f"probe: {', '.join(n + '()' for n in rejected)} does not "
                                  "compute x·cos + rotate_half(x)·sin")
        else:
            done.skipped[path] = (f"no function rope(x, cos, sin) or (q, k, cos, sin) called by "
                                  f"{type(module).__name__}.forward (RoPE written inline is no "
                                  "call to route)")
    return done
