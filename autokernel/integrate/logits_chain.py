"""An LM head and its loss, F.cross_entropy(h @ Wᵀ), routed as ONE call of linear_cross_entropy.

The fused kernel never holds the [N, V] logits, so no single call of the pair can be sent to it.
Inside the kernel's scopes (the modules where the profiler found the pair) an F.linear (nn.Linear
calls it) whose weight has the profiled head's shape [V, D] therefore returns a `PendingLogits`:
a stand-in for the logits that records what the code does with them next, without computing
them:

- reshapes that keep the vocabulary as the last dim (`logits.view(-1, V)`, `reshape`), indexing
  that leaves the last dim whole (`logits[..., :-1, :]`, the shift of a causal LM's loss),
  `.contiguous()`, and casts to float32 (`.float()`, `.to(torch.float32)`): each is applied to
  the hidden state instead, which the kernel then reads;
- F.cross_entropy of the stand-in, 2-D, against int64 targets, with the mean over targets that
  are not -100 and no class weights or smoothing: the kernel runs on the hidden state, the
  head's weight and the targets, and its loss is the call's result (in the logits' dtype).

Anything else done with the stand-in (another loss, a softmax, reading its values, returning it
from the scope) computes the recorded calls exactly as the code wrote them (the F.linear, then
each step), and from then on the stand-in is those values; the report counts one call left to
PyTorch with the reason. Logits used after the kernel took the loss (a forward that returns
both) are computed the same way, and the report says so.

Limits: a head with a bias is left to PyTorch (the kernel has no bias); under torch.compile
nothing is deferred; code that checks `isinstance(logits, torch.Tensor)` between the head and
the loss sees the stand-in; an nn.Linear head that another kernel's module route replaced (a
matmul kernel of role "linear") never calls F.linear, so it is not deferred.

This file imports only torch (and routing), because `autokernel export` inlines it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import handle_torch_function

from autokernel.integrate.attention_chain import DEFERRED, NOT_MINE
from autokernel.integrate.routing import Outcome, RouteStats, RoutedKernel
from autokernel.integrate.route_helpers import call_kernel, call_refusal, kernel_running
from autokernel.integrate.plans import call_signature

LINEARS = (F.linear,)
LOSSES = (F.cross_entropy,)
RESHAPES = (torch.Tensor.view, torch.Tensor.reshape, torch.reshape)
NO_OPS = (torch.Tensor.contiguous,)
LOGIT_CASTS = (torch.Tensor.float, torch.Tensor.to)
INDEXING = (torch.Tensor.__getitem__,)
FOLLOWED_STEPS = (*RESHAPES, *NO_OPS, *INDEXING)  # the steps applied to the hidden state
LOSS_ARGUMENTS = ("input", "target", "weight", "size_average", "ignore_index", "reduce",
                  "reduction", "label_smoothing")
LOSS_DEFAULTS = (None, None, None, None, -100, None, "mean", 0.0)
# What F.cross_entropy hands torch's function handling: (input, target) and these keywords.
LOSS_KEYWORDS = frozenset(LOSS_ARGUMENTS[2:])
# The logits' shape and dtype on the meta device, by (shape, dtype): every LM head call of a
# shape needs one, and making it costs ~3 µs of host time. Meta tensors hold no values, and
# nothing here changes one in place (each step makes a new one), so calls can share them.
LOGITS_METAS: dict[tuple[Any, ...], torch.Tensor] = {}
MAX_LOGITS_METAS = 64
# A reshape of one of those metas, by (step, id of the meta, `call_signature` of the step's
# other arguments): (the meta, its reshape). Followed on every LM head call (`logits.view(-1,
# V)`), the step's own meta call costs ~1.5 µs; the entry keeps its meta alive, so the id in the
# key is that meta's for as long as the entry lives.
LOGITS_STEPS: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] = {}


@dataclass
class Head:
    """What every stand-in of one LM head call shares."""

    kernel: RoutedKernel
    stats: RouteStats
    call: tuple[Any, tuple[Any, ...], Mapping[str, Any]]  # the F.linear as the code made it
    weight: torch.Tensor
    routed: bool = False  # the kernel took a loss of these logits
    value: torch.Tensor | None = None  # the F.linear's output, once something needed it


@dataclass
class _LogitsRecord:
    steps: tuple[tuple[Any, tuple[Any, ...], Mapping[str, Any]], ...]  # after the F.linear
    hidden: torch.Tensor | None  # the kernel's rows, as the steps so far reshaped them
    meta: torch.Tensor  # the logits' shape and dtype, on the meta device
    value: torch.Tensor | None = None  # once computed
    # The meta's shape and dtype, read once where records are made (a route's handler, with
    # the Router's mode off): a read of the meta tensor's attributes in the model's code, where
    # the mode is on, would be a torch call of its own through the Router (~3 µs).
    shape: torch.Size = field(init=False)
    dtype: torch.dtype = field(init=False)

    def __post_init__(self) -> None:
        self.shape, self.dtype = self.meta.shape, self.meta.dtype


class PendingLogits:
    """The logits of one LM head call (and the reshapes that followed), not computed until
    something needs them."""

    def __init__(self, head: Head, record: _LogitsRecord) -> None:
        object.__setattr__(self, "_head", head)
        object.__setattr__(self, "_record", record)

    # What can be answered without the values --------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        value = self._record.value
        return value.shape if value is not None else self._record.shape

    @property
    def dtype(self) -> torch.dtype:
        value = self._record.value
        return value.dtype if value is not None else self._record.dtype

    @property
    def device(self) -> torch.device:
        return self._head.weight.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_cuda(self) -> bool:
        return self._head.weight.is_cuda

    @property
    def requires_grad(self) -> bool:
        value = self._record.value
        if value is not None:
            return value.requires_grad
        _, args, kwargs = self._head.call
        return torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *kwargs.values()))

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return self._record.shape.numel()

    def __repr__(self) -> str:
        return f"PendingLogits(shape={list(self.shape)}, dtype={self.dtype})"

    # Everything else computes the values first -------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # dunders and our own fields (copy and pickle probe them)
            raise AttributeError(name)
        return getattr(self.values(f"logits used by {name}"), name)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        return follow_logits(func, args, kwargs or {})

    def values(self, reason: str) -> torch.Tensor:
        """The computed logits, from anywhere: through torch's function handling, so that a
        Router active here computes them with its routes off."""
        return handle_torch_function(_logits_values, (self,), self, reason)

    def realize(self, reason: str) -> torch.Tensor:
        """The logits, computed by the recorded calls (once); the report counts the head as left
        to PyTorch, for `reason` (or as computed besides the kernel's loss). Called with no
        torch-function mode active (`values`)."""
        record, head = self._record, self._head
        if record.value is None:
            if head.value is None:  # counted once per head, however many views need it
                what = "also computed" if head.routed else "left to PyTorch"
                head.stats.count_fallback(f"LM head logits {what}: {reason}")
                func, args, kwargs = head.call
                head.value = func(*args, **kwargs)
            value = head.value
            for step, rest, step_kwargs in record.steps:
                value = step(value, *rest, **step_kwargs)
            record.value = value
        return record.value

    def then(self, func: Any, rest: tuple[Any, ...], kwargs: Mapping[str, Any],
             meta: torch.Tensor, hidden: torch.Tensor | None) -> PendingLogits:
        record = self._record
        steps = (*record.steps, (func, rest, dict(kwargs)))
        return PendingLogits(self._head, _LogitsRecord(steps, hidden, meta))


def _logits_values(logits: Any, reason: str) -> torch.Tensor:
    """`PendingLogits.values` as a function torch's function handling can dispatch."""
    return logits.realize(reason) if isinstance(logits, PendingLogits) else logits


def _logits_method(func: Callable[..., Any]) -> Any:
    def method(self: PendingLogits, *args: Any, **kwargs: Any) -> Any:
        return _dispatch_logits(func, self, args, kwargs)

    method.__name__ = func.__name__
    return method


def _dispatch_logits(func: Any, logits: PendingLogits, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
    """`handle_torch_function(func, (logits,), logits, *args, **kwargs)` for a call whose only
    overloaded argument is the stand-in, as torch does it (the innermost mode, popped while it
    runs, else the stand-in's own __torch_function__), without its Python generality: finding
    the overloaded arguments and a generator-based context manager cost ~2 µs on the
    `logits.view(-1, V)` of every LM head call."""
    types, args = (PendingLogits,), (logits, *args)
    if torch._C._is_torch_function_mode_enabled():
        mode = torch._C._pop_torch_function_stack()
        try:
            out = mode.__torch_function__(func, types, args, kwargs)
        finally:
            torch._C._push_on_torch_function_stack(mode)
        if out is not NotImplemented:
            return out
    return PendingLogits.__torch_function__(func, types, args, kwargs)


def _logits_realizing(name: str) -> Any:
    def method(self: PendingLogits, *args: Any) -> Any:
        return getattr(self.values(f"logits used by {name.strip('_')}"), name)(*args)

    method.__name__ = name
    return method


for _func in (*RESHAPES[:2], *NO_OPS, *LOGIT_CASTS, *INDEXING):
    setattr(PendingLogits, _func.__name__, _logits_method(_func))
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__matmul__", "__rmatmul__", "__neg__", "__pow__",
              "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__setitem__",
              "__len__", "__iter__", "__bool__", "__float__", "__int__", "__index__",
              "__array__", "__iadd__", "__isub__", "__imul__", "__itruediv__"):
    setattr(PendingLogits, _name, _logits_realizing(_name))
PendingLogits.__hash__ = object.__hash__  # type: ignore[method-assign]
del _func, _name


# ---------------------------------------------------------------------------------------------
# The route, and following the stand-in


def defer_linear(kernel: RoutedKernel, func: Any, args: tuple[Any, ...],
                 kwargs: Mapping[str, Any], stats: RouteStats) -> Outcome:
    """A Router route for F.linear: a stand-in for an LM head's logits (the profiled head's
    [V, D] weight; a manifest without the shape defers nothing, as every other linear layer
    of the scope would be deferred too)."""
    if torch.compiler.is_compiling() or kernel_running() or len(kernel.shape) != 3:
        return None, NOT_MINE
    if not kwargs and 2 <= len(args) <= 3:  # nn.Linear's F.linear(input, weight, bias)
        hidden, weight, bias = args[0], args[1], (args[2] if len(args) == 3 else None)
    else:
        bound = _bound_loss_arguments(("input", "weight", "bias"), args, kwargs) or {}
        hidden, weight, bias = bound.get("input"), bound.get("weight"), bound.get("bias")
    if not (isinstance(hidden, torch.Tensor) and isinstance(weight, torch.Tensor)) or \
            weight.ndim != 2 or hidden.ndim < 1 or hidden.shape[-1] != weight.shape[1] or \
            not hidden.is_floating_point():
        return None, NOT_MINE
    if weight.shape != (kernel.shape[2], kernel.shape[1]):
        return None, NOT_MINE  # another linear layer in the same module
    if bias is not None:
        return None, "LM head has a bias"
    meta = _logits_meta((*hidden.shape[:-1], weight.shape[0]), hidden.dtype)
    head = Head(kernel, stats, (func, args, dict(kwargs) if kwargs else {}), weight)
    return PendingLogits(head, _LogitsRecord((), hidden, meta)), DEFERRED


def _logits_meta(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The logits' shape and dtype on the meta device, shared by the calls of that shape
    (`LOGITS_METAS`)."""
    key = (shape, dtype)
    meta = LOGITS_METAS.get(key)
    if meta is None:
        meta = torch.empty(shape, dtype=dtype, device="meta")
        if len(LOGITS_METAS) < MAX_LOGITS_METAS:
            LOGITS_METAS[key] = meta
    return meta


def is_lm_head(kernel: RoutedKernel, module: torch.nn.Module) -> bool:
    """The nn.Linear whose F.linear `defer_linear` would defer (the profiled head's [V, D]
    weight, no bias): a matmul kernel's module route must leave its forward alone."""
    return (isinstance(module, torch.nn.Linear) and module.bias is None
            and len(kernel.shape) == 3
            and tuple(module.weight.shape) == (kernel.shape[2], kernel.shape[1]))


def _bound_loss_arguments(names: tuple[str, ...], args: tuple[Any, ...],
                          kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    if len(args) > len(names) or any(k not in names[len(args):] for k in kwargs):
        return None
    return dict(zip(names, args)) | dict(kwargs)


def holds_logits(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    # Loops, not any() over generators: a Router asks this of each call with a stand-in.
    for a in args:
        if isinstance(a, PendingLogits):
            return True
    for a in kwargs.values():
        if isinstance(a, PendingLogits):
            return True
    return False


def realize_logits(value: Any, reason: str) -> Any:
    """`value` with every stand-in in it (a tuple, list or dict of outputs) computed; call it
    where no Router is active, or from inside one's handler."""
    if isinstance(value, PendingLogits):
        return value.realize(reason)
    if isinstance(value, (tuple, list)):
        items = [realize_logits(v, reason) for v in value]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        return type(value)((k, realize_logits(v, reason)) for k, v in value.items())
    return value


def follow_logits(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                  compute: bool = True) -> Any:
    """A torch call with a stand-in among its arguments: recorded, the kernel, or computed.
    `compute=False` (the Router) returns NotImplemented instead of computing the call, so that
    the call, on computed logits, is then routed like any other (a softmax of the logits)."""
    if func is _logits_values:
        return _logits_values(*args, **kwargs)
    first = args[0] if args else None
    if isinstance(first, PendingLogits) and first._record.value is not None:
        first = None  # already computed: an ordinary tensor from now on
    if isinstance(first, PendingLogits) and not torch.compiler.is_compiling():
        if func in LOSSES:
            out, why = _loss(first, args, kwargs)
            if why is None:
                return out
            first.realize(why)
        else:
            out = _logits_step(first, func, args[1:], kwargs)
            if out is not None:
                return out
    if not compute:
        return NotImplemented
    args, kwargs = computed_arguments(func, args, kwargs)
    return func(*args, **kwargs)


def computed_arguments(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
                       ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with every stand-in computed (the reason names the call)."""
    reason = f"logits used by {getattr(func, '__name__', str(func))}"
    return (tuple(realize_logits(a, reason) for a in args),
            {k: realize_logits(v, reason) for k, v in kwargs.items()})


def _logits_step(p: PendingLogits, func: Any, rest: tuple[Any, ...],
          kwargs: Mapping[str, Any]) -> PendingLogits | None:
    """The stand-in after `func(p, *rest)`, or None when the kernel could not follow it."""
    record = p._record
    if func in LOGIT_CASTS:
        dtype = _logits_cast_dtype(func, rest, kwargs)
        if dtype is None or (dtype != record.dtype and dtype != torch.float32):
            return None  # the kernel's loss is float32: only a cast up to it is the same loss
        meta = _meta_step(torch.Tensor.to, record.meta, (dtype,), {})
        return None if meta is None else p.then(func, rest, kwargs, meta, record.hidden)
    if func not in FOLLOWED_STEPS or (func is torch.reshape and kwargs):
        return None
    meta = _meta_step(func, record.meta, rest, kwargs)
    if meta is None:
        return None
    hidden = record.hidden
    vocab = p._head.weight.shape[0]
    if hidden is not None:
        if meta.ndim < 1 or meta.shape[-1] != vocab or (
                func in INDEXING and not _keeps_last_dim(rest[0], len(record.shape))):
            hidden = None  # the vocabulary is no longer the last dim: only computing follows
        elif func in RESHAPES:
            rows = (*meta.shape[:-1], hidden.shape[-1])
            # Already in that shape (a [tokens, D] hidden state under view(-1, V)): the tensor
            # itself, which the kernel only reads, without a view's ~1.5 µs.
            if hidden.shape != rows:
                hidden = hidden.reshape(rows)
        elif func in INDEXING:
            hidden = hidden[rest[0]]
    return p.then(func, rest, kwargs, meta, hidden)


def _meta_step(func: Any, meta: torch.Tensor, rest: tuple[Any, ...],
               kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    """`func(meta, *rest, **kwargs)`, or None where torch refuses it; the same call on the same
    meta answered from LOGITS_STEPS (steps with arguments a signature cannot hold, an index
    with slices, are made every time)."""
    signature = call_signature(rest, kwargs)
    key = None if signature is None else (func, id(meta), signature)
    found = LOGITS_STEPS.get(key) if key is not None else None
    if found is not None and found[0] is meta:
        return found[1]
    try:
        stepped = func(meta, *rest, **kwargs)
    except (RuntimeError, TypeError, IndexError, ValueError):
        return None
    if key is not None and len(LOGITS_STEPS) < MAX_LOGITS_METAS:
        LOGITS_STEPS[key] = (meta, stepped)
    return stepped


def _keeps_last_dim(index: Any, ndim: int) -> bool:
    """Does `logits[index]` leave the last dim whole (so the same index works on the hidden
    state)? Slices, ints and one Ellipsis only, ending in a full slice or short of the last
    dim."""
    items = index if isinstance(index, tuple) else (index,)
    if not all(i is Ellipsis or isinstance(i, (slice, int)) and not isinstance(i, bool)
               for i in items) or sum(i is Ellipsis for i in items) > 1:
        return False
    if items and items[-1] == slice(None):
        return True
    return Ellipsis not in items and len(items) < ndim


def _logits_cast_dtype(func: Any, rest: tuple[Any, ...],
                       kwargs: Mapping[str, Any]) -> torch.dtype | None:
    if func is torch.Tensor.float:
        return torch.float32 if not rest and not kwargs else None
    if len(rest) == 1 and not kwargs and isinstance(rest[0], torch.dtype):
        return rest[0]
    if not rest and set(kwargs) == {"dtype"} and isinstance(kwargs["dtype"], torch.dtype):
        return kwargs["dtype"]
    return None


def _loss(p: PendingLogits, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Outcome:
    """F.cross_entropy(p, ...): the kernel's loss, or why the logits must be computed."""
    head, record = p._head, p._record
    if len(args) == 2 and kwargs.keys() == LOSS_KEYWORDS:
        # How F.cross_entropy hands the call on (every argument but the first two by name):
        # read as it is, without binding.
        bound = {"target": args[1], **kwargs}
    else:
        bound = _bound_loss_arguments(LOSS_ARGUMENTS, args, kwargs)
        if bound is None:
            return None, "loss arguments"
        bound = dict(zip(LOSS_ARGUMENTS, LOSS_DEFAULTS)) | bound
    if bound["weight"] is not None or bound["size_average"] is not None or \
            bound["reduce"] is not None or bound["label_smoothing"] != 0.0:
        return None, "loss with class weights, smoothing or legacy arguments"
    if bound["ignore_index"] != -100 or bound["reduction"] != "mean":
        return None, "loss ignore_index or reduction"
    targets, hidden = bound["target"], record.hidden
    if hidden is None:
        return None, "logits reshaped away from [tokens, vocabulary]"
    if len(record.shape) != 2 or not isinstance(targets, torch.Tensor) or targets.ndim != 1 or \
            targets.dtype != torch.int64 or targets.shape[0] != hidden.shape[0]:
        return None, "loss shapes"
    why = call_refusal(head.kernel, hidden, head.weight)
    if why is None:
        out, why = call_kernel(head.kernel, hidden, head.weight, targets)
    if why is not None:
        return None, why
    head.routed = True
    head.stats.count_call()
    # F.cross_entropy returns the logits' dtype. By keyword: `.to(dtype)` by position first
    # tries the device overloads (~1 µs more).
    dtype = record.dtype
    return (out if out.dtype == dtype else out.to(dtype=dtype)), None
