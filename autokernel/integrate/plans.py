"""Decisions made once per call signature: a route's plan, kept per `call_signature`.

A route's checks (dtype, device, shapes, the axis and the parameters it was verified with, the
module's weight and eps) depend only on what `call_signature` keeps of a call: each tensor's
shape, strides, dtype, device and requires_grad, and every other argument's value, with the
grad mode. So a route makes a *plan* the first time it sees a signature: the reason the call
is left to PyTorch (a str), or a runner that calls the kernel on this call's values with
nothing left to check (the registered op or the plain function chosen, shapes computed). Each
later call of that signature pays a dictionary lookup and the runner. Nothing is cached while
torch.compile traces (Dynamo traces the route's checks instead) or under autocast (whose dtype
is not in the signature: the checks refuse it), nor for a call holding a value the signature
cannot stand for (a tensor subclass, an object): those are planned on every call.

- the signature and the store: `call_signature`, `plans_apply`, `remember` (`MAX_PLANS`);
- a call route's plans: `planned_call`, `run_planner`, `argument_getter`, `argument_runner`;
- a module route's reads: `module_attribute`.

Like routing.py it imports only torch: `autokernel export` inlines it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from autokernel.integrate.integration import Plan
from autokernel.integrate.routing import Outcome, RoutedKernel, RouteStats


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
    # `plans_apply()`, written out: every routed torch call comes here.
    if not torch.compiler.is_compiling() and not torch._C._is_any_autocast_enabled():
        signature = call_signature(args, kwargs)
        if signature is not None:
            key = (func, signature)
            plan = plans.get(key)
            if plan is not None:
                return (None, plan) if type(plan) is str else plan(args, kwargs)
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


def argument_runner(call: Callable[..., Outcome], names: tuple[str, ...], args: tuple[Any, ...],
                    wanted: tuple[str, ...], *extra: Any) -> Runner:
    """A runner `(args, kwargs) -> call(*the wanted arguments, *extra)` for calls of this
    signature (`argument_getter`'s positions). When the call passes them all by position (most
    calls do), they are read straight from `args`, with no getter per argument: a planned call
    then pays one Python frame for its arguments, not one per argument."""
    positions = tuple(names.index(name) for name in wanted)
    # Written out per count (one to three arguments: every route's), with no import beyond
    # what an exported module may hold (`autokernel export` inlines this file).
    if all(position < len(args) for position in positions):
        if len(positions) == 1:
            (position,) = positions
            if not extra:
                return lambda args, kwargs: call(args[position])
            return lambda args, kwargs: call(args[position], *extra)
        if len(positions) == 2:
            first, second = positions
            return lambda args, kwargs: call(args[first], args[second], *extra)
        if len(positions) == 3:
            first, second, third = positions
            return lambda args, kwargs: call(args[first], args[second], args[third], *extra)
    getters = tuple(argument_getter(names, args, name) for name in wanted)
    return lambda args, kwargs: call(*[get(args, kwargs) for get in getters], *extra)


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
