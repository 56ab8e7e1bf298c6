"""A residual add and the norm it feeds, routed as ONE call of a fused kernel (add_rmsnorm,
add_layernorm).

A pre-norm block writes `h = x + attn(x); y = self.norm(h)`: two kernels in PyTorch, one in
ours, which reads x and residual once and returns (y, h). No single call of the pair can be sent
to it, so inside the fused kernel's scopes (the modules where the profiler found the pair) a
same-shape, same-dtype `x + residual` (torch.add, Tensor.add, `+`) whose last dim is the width of
a tapped norm returns a `PendingSum`: a stand-in that remembers its two operands and the call
that made it, without computing it.

- Passed as the only argument to a recognized norm module (nn.RMSNorm, a hand-written RMSNorm
  that passes the op entry's probe; nn.LayerNorm), which patching wrapped in a `FusedNormTap`,
  it runs the kernel: the module returns y, and the stand-in becomes h, the kernel's second
  output.
- Any other use (a torch call, a method, an operator, reading it, returning it from the scope)
  first computes the add exactly as the code wrote it, and from then on the stand-in is that
  value: such an add was never part of a fused pair, so nothing is counted.

A tapped norm that receives a stand-in it cannot fuse (a dtype or eps the harness did not
verify) counts a call left to PyTorch, with the reason, and runs what was there before (the
rmsnorm or layernorm kernel's route, or the module's own forward) on the computed sum.

Limits: under torch.compile nothing is deferred (the compiler fuses the pair itself); code that
checks `isinstance(h, torch.Tensor)` between the add and the norm sees the stand-in; x or
residual changed in place between the add and the norm would be seen changed; the add must be
out of place (`h += r` is not deferred).

This file imports only torch (and routing), because `autokernel export` inlines it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.overrides import handle_torch_function

from autokernel.integrate.attention_chain import DEFERRED, NOT_MINE
from autokernel.integrate.integration import FusedAddRoute, Plan
from autokernel.integrate.routing import Outcome, RoutedKernel, RouteStats
from autokernel.integrate.route_helpers import (
    affine_or_constant,
    call_refusal,
    host_code,
    kernel_caller,
    kernel_running,
    plain_arguments,
    positional_arity,
    unverified_value,
)
from autokernel.integrate.plans import call_signature, plans_apply, remember

ADD_FUNCTIONS = (torch.add, torch.Tensor.add, torch.Tensor.__add__)
EPS_ATTRIBUTES = ("eps", "variance_epsilon", "epsilon")


# ---------------------------------------------------------------------------------------------
# What norm routes share


def eps_attribute(module: nn.Module) -> str | None:
    """The name of the module's eps attribute (a non-negative float), or None."""
    for name in EPS_ATTRIBUTES:
        value = getattr(module, name, None)
        if isinstance(value, float) and value >= 0:
            return name
    return None


def handwritten_norm(module: nn.Module) -> dict[str, Any] | None:
    """A hand-written RMSNorm's structure: a floating 1-D weight, no bias tensor, no children,
    forward(x) and an eps attribute; None for anything else (its probe decides the rest)."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 1 or \
            not weight.is_floating_point() or isinstance(getattr(module, "bias", None),
                                                         torch.Tensor):
        return None
    if any(True for _ in module.children()) or positional_arity(module) != 1:
        return None
    name = eps_attribute(module)
    return None if name is None else {"eps_attribute": name}


def fake_two_like_first(x: torch.Tensor, *rest: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, h) of a fused add + norm: both of x's shape and dtype."""
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format))


# ---------------------------------------------------------------------------------------------
# The stand-in


class PendingSum:
    """`x + residual`, not computed until something needs it (or computed by the fused kernel)."""

    def __init__(self, kernel: RoutedKernel, func: Callable[..., Any], x: torch.Tensor,
                 residual: torch.Tensor) -> None:
        object.__setattr__(self, "_kernel", kernel)
        object.__setattr__(self, "_call", (func, x, residual))
        object.__setattr__(self, "_value", None)

    @property
    def operands(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._call[1], self._call[2]

    @property
    def pending(self) -> bool:
        return self._value is None

    def settle(self, value: torch.Tensor) -> None:
        """The sum, as the fused kernel computed it."""
        object.__setattr__(self, "_value", value)

    # What can be answered without the value ----------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        return self._call[1].shape

    @property
    def dtype(self) -> torch.dtype:
        return self._call[1].dtype

    @property
    def device(self) -> torch.device:
        return self._call[1].device

    @property
    def ndim(self) -> int:
        return self._call[1].ndim

    @property
    def is_cuda(self) -> bool:
        return self._call[1].is_cuda

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def __repr__(self) -> str:
        return f"PendingSum(shape={list(self.shape)}, dtype={self.dtype})"

    # Everything else computes the value first --------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # dunders and our own fields (copy and pickle probe them)
            raise AttributeError(name)
        return getattr(self.value(), name)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if func is sum_value:
            return sum_value(*args, **(kwargs or {}))
        args, kwargs = realize_sums(args, kwargs or {})
        return func(*args, **kwargs)

    def value(self) -> torch.Tensor:
        """The sum, from anywhere: through torch's function handling, so that a Router active
        here computes it with its routes off (the add is not deferred again). A settled sum
        (the fused kernel's h) is simply returned: that round trip would return it too."""
        if self._value is not None:
            return self._value
        return handle_torch_function(sum_value, (self,), self)

    def compute(self) -> torch.Tensor:
        """The sum, computed (once) by the call the code made; with no torch-function mode
        active (`value`)."""
        if self._value is None:
            func, x, residual = self._call
            object.__setattr__(self, "_value", func(x, residual))
        return self._value


def sum_value(pending: Any) -> Any:
    """`PendingSum.value` as a function torch's function handling can dispatch."""
    return pending.compute() if isinstance(pending, PendingSum) else pending


def _sum_operator(func: Callable[..., Any]) -> Any:
    def method(self: PendingSum, *args: Any) -> Any:
        settled = self._value
        if settled is not None and plain_arguments(args, None):
            # What torch's function handling would come to (a Router computes the stand-ins,
            # then sees the call as made on tensors), without its Python round trip: the next
            # block's `h + mlp(...)` on the fused kernel's h, every forward.
            return func(settled, *args)
        return handle_torch_function(func, (self,), self, *args)

    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__matmul__", "__rmatmul__", "__pow__", "__neg__",
              "__getitem__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
    setattr(PendingSum, _name, _sum_operator(getattr(torch.Tensor, _name)))


def _sum_realizing(name: str) -> Any:
    def method(self: PendingSum, *args: Any) -> Any:
        return getattr(self.value(), name)(*args)

    return method


for _name in ("__setitem__", "__len__", "__iter__", "__bool__", "__float__", "__int__",
              "__index__", "__contains__", "__array__", "__iadd__", "__isub__", "__imul__",
              "__itruediv__", "__abs__", "__invert__", "__and__", "__or__", "__xor__", "__mod__",
              "__floordiv__", "__rpow__"):
    setattr(PendingSum, _name, _sum_realizing(_name))
PendingSum.__hash__ = object.__hash__  # type: ignore[method-assign]
del _name


def holds_sum(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    if plain_arguments(args, kwargs):  # the common case, answered without a generator per call
        return False
    return any(_holds(a) for a in args) or any(_holds(v) for v in kwargs.values())


def _holds(value: Any) -> bool:
    if isinstance(value, PendingSum):
        return True
    return isinstance(value, (tuple, list)) and any(_holds(v) for v in value)


def realize_sum(value: Any) -> Any:
    """`value` with every stand-in in it (a tuple, list or dict of them) computed; call it where
    no Router is active, or from inside one's handler."""
    if isinstance(value, PendingSum):
        return value.compute()
    if type(value) is tuple and len(value) == 2 and type(value[0]) is torch.Tensor:
        # A pre-norm block's (y, h), h the fused kernel's settled sum: written out, without
        # the generic walk's list and type checks, on every forward that returns the pair.
        second = value[1]
        if type(second) is torch.Tensor:
            return value
        if type(second) is PendingSum:
            return value[0], second.compute()
    if isinstance(value, (tuple, list)):
        items = [realize_sum(v) for v in value]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        return type(value)((k, realize_sum(v)) for k, v in value.items())
    return value


def realize_sums(args: tuple[Any, ...], kwargs: Mapping[str, Any]
                 ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return tuple(realize_sum(a) for a in args), {k: realize_sum(v) for k, v in kwargs.items()}


def value_of_sums(args: tuple[Any, ...], kwargs: Mapping[str, Any]
                  ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments with each stand-in among them computed, from a module's forward (where a
    Router may be active: `PendingSum.value`)."""
    def one(value: Any) -> Any:
        return value.value() if isinstance(value, PendingSum) else value

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


# ---------------------------------------------------------------------------------------------
# The add (a Router call route) and the norm (a tap on the module's forward)


def defer_add(kernel: RoutedKernel, func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
              stats: RouteStats) -> Outcome:
    """A Router route for `x + residual`: a stand-in where a tapped norm may take it."""
    if kwargs or len(args) != 2 or torch.compiler.is_compiling() or kernel_running():
        return None, NOT_MINE
    x, residual = args
    if type(x) is not torch.Tensor or type(residual) is not torch.Tensor:  # noqa: E721
        return None, NOT_MINE  # a Parameter, a subclass, a number: not a residual stream
    if x.shape != residual.shape or x.ndim == 0 or x.dtype != residual.dtype or \
            not x.is_floating_point() or x.shape[-1] not in stats.fused_widths:
        return None, NOT_MINE
    # Deferred even where the kernel may not take it (an unverified dtype): the tapped norm then
    # counts the pair as left to PyTorch, with the reason.
    return PendingSum(kernel, func, x, residual), DEFERRED


class FusedNormTap:
    """A norm module's forward that fuses a pending residual add into it, and otherwise runs
    what was there before (another kernel's route, or the module's own forward). The fusion is
    decided once per signature of its values (`FusedAddRoute.inputs`: x, residual, the norm's
    affine tensors and eps) and kept, as a module route's is."""

    def __init__(self, module: nn.Module, kernel: RoutedKernel, stats: RouteStats,
                 route: FusedAddRoute, **details: Any) -> None:
        self.module = module
        self.kernel = kernel
        self.stats = stats
        self.inputs = route.inputs
        self.plan = route.plan
        self.details = details
        self.previous = module.__dict__.get("forward")
        self.cache: dict[str, Any] = {}
        self.plans: dict[Any, Any] = {}

    def original(self, *args: Any, **kwargs: Any) -> Any:
        if self.previous is not None:
            return self.previous(*args, **kwargs)
        return type(self.module).forward(self.module, *args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        pending = args[0] if len(args) == 1 and not kwargs else None
        if isinstance(pending, PendingSum) and pending.pending and pending._kernel is self.kernel:
            with host_code():  # the checks and the kernel call: ours, not the model's calls
                out, why = self._fuse(pending)
            if why is None:
                self.stats.count_call()
                return out
            self.stats.count_fallback(why)
        if holds_sum(args, kwargs):
            args, kwargs = value_of_sums(args, kwargs)
        return self.original(*args, **kwargs)

    def _fuse(self, pending: PendingSum) -> Outcome:
        """The fused kernel on the pending sum's operands: the norm's output, with the sum
        settled as the kernel's h; or why not."""
        values = self.inputs(self, pending)
        if type(values) is str:
            return None, values
        key = call_signature(values) if plans_apply() else None
        plan = self.plans.get(key) if key is not None else None
        if plan is None:
            plan = remember(self.plans, key, self.plan(self, *values))
        if type(plan) is str:
            return None, plan
        out, why = plan(*values)
        if why:
            return None, why
        y, h = out
        pending.settle(h)
        return y, None


def fused_norm_plan(tap: FusedNormTap, x: torch.Tensor, residual: torch.Tensor,
                    eps: float | None, *affine: tuple[torch.Tensor | None, float]) -> Plan:
    """The fused kernel's plan for x + residual and the norm's affine tensors, each given as
    (the module's tensor or None, the constant a missing one stands for), in the kernel's
    order. Its runner takes (x, residual, eps, *the module's affine tensors) and returns
    ((y, h), None) in x's shape, or (None, why not)."""
    width = x.shape[-1]
    kernel = tap.kernel
    names = ("weight", "bias")
    constants = tuple(affine_or_constant(tensor, tap, name, width, x, fill)
                      for name, (tensor, fill) in zip(names, affine))
    if any(t.shape != (width,) for t in constants):
        return "shape"
    if eps is None:  # nn.RMSNorm's default
        eps = torch.finfo(x.dtype).eps
    why = call_refusal(kernel, x, residual, *constants) or unverified_value(kernel, "eps", eps)
    if why:
        return why
    call, eps = kernel_caller(kernel, x, residual, *constants), float(eps)
    missing = tuple(i for i, (tensor, _) in enumerate(affine) if tensor is None)
    shape = tuple(x.shape)
    flat = x.ndim != 2  # the kernel takes rows; a 2-D x already is its rows

    def run(x: torch.Tensor, residual: torch.Tensor, _eps: Any, *tensors: Any) -> Outcome:
        if missing:  # a norm without weight or bias: the constant that stands for it
            tensors = tuple(constants[i] if i in missing else t for i, t in enumerate(tensors))
        if flat:
            out, why = call(x.reshape(-1, width), residual.reshape(-1, width), *tensors, eps)
            if why:
                return None, why
            y, h = out
            return (y.reshape(shape), h.reshape(shape)), None
        return call(x, residual, *tensors, eps)

    return run
