"""Explicit attention, softmax(q @ kᵀ · scale [causal mask]) @ v, routed to flash_attention.

ViT, minGPT and HF's eager attention write attention out as torch calls. The kernel replaces the
whole chain, and what it saves is the S×S score matrix, so no single call of the chain can be
sent to it. Inside the flash_attention kernel's scopes (the modules where the profiler found the
chain) a 4-D q @ kᵀ of matching shapes therefore returns a `PendingScores`: a stand-in for the
scores that records what the code does with them next, without computing them:

- a product with, or division by, a positive number (or a 0-dim tensor holding one);
- a causal mask: `masked_fill(mask, v)` of the strict upper triangle, or `torch.where(keep, s, v)`
  keeping the lower one, with v = -inf or the dtype's lowest value (the mask's values are
  checked, once per mask tensor and version, and never while a CUDA graph is captured; a mask
  made in the scope from a 0/1 table, `bias[..] == 0` or `~tril`, takes the table's verdict,
  read once per table, so a mask made anew each forward is never read);
- softmax over the last dim, casts (`.float()`, `.to(dtype)`, `.type_as(t)`), dropout that does
  nothing (eval mode or p = 0).

Then `@ v` sends q, k, v, the causal flag and the scale to the kernel. Anything else done with
the stand-in (another mask, an addition, indexing it, reading its values, returning it from the
scope) computes the recorded calls exactly as the code wrote them, and from then on the stand-in
is those values: the model computes what it always did, only without the kernel, and the report
counts one call left to PyTorch with the reason.

Limits: q, k and v must have one shape [B, H, S, D] (no broadcast of k/v heads, no cross-
attention to another length); code that checks `isinstance(scores, torch.Tensor)` between q @ kᵀ
and @ v sees the stand-in; q or k changed in place between q @ kᵀ and the softmax would be seen
changed. Under torch.compile the stand-in steps aside (Dynamo cannot trace it) and the chain is
captured as written: compiled through `delivery.compile_with_kernels` (the delivered compile
modes and verify's compile ablation), an Inductor pass then replaces unmasked chains with the
kernel's op (`compiled_attention.py`); masked chains, and a plain torch.compile, stay Inductor's.

This file imports only torch (and routing), because `autokernel export` inlines it.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import handle_torch_function

from autokernel.integrate.routing import Outcome, RouteStats, RoutedKernel
from autokernel.integrate.route_helpers import attention_scale_unverified, call_kernel, call_refusal

DEFERRED = "\0deferred"  # a route's reason: the output is a stand-in, count nothing yet
NOT_MINE = "\0not mine"  # a route's reason: not the kind of call this kernel takes

CHAIN_STARTS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__)
SCALES: dict[Any, bool] = {  # function -> multiplies (False: divides)
    torch.mul: True, torch.Tensor.mul: True, torch.Tensor.__mul__: True,
    torch.Tensor.__rmul__: True, torch.div: False, torch.Tensor.div: False,
    torch.Tensor.__truediv__: False, torch.true_divide: False, torch.Tensor.true_divide: False,
}
IN_PLACE: dict[Any, Any] = {  # recorded as the out-of-place call, so a replay mutates nothing
    torch.Tensor.mul_: torch.Tensor.mul, torch.Tensor.div_: torch.Tensor.div,
    torch.Tensor.masked_fill_: torch.Tensor.masked_fill,
}
MASKED_FILLS = (torch.Tensor.masked_fill, torch.masked_fill)
SOFTMAXES: dict[Any, tuple[str, ...]] = {
    torch.softmax: ("input", "dim", "dtype"),
    torch.Tensor.softmax: ("input", "dim", "dtype"),
    F.softmax: ("input", "dim", "_stacklevel", "dtype"),
}
CASTS: dict[Any, torch.dtype | None] = {  # None: the dtype comes from the arguments
    torch.Tensor.float: torch.float32, torch.Tensor.half: torch.float16,
    torch.Tensor.bfloat16: torch.bfloat16, torch.Tensor.double: torch.float64,
    torch.Tensor.to: None, torch.Tensor.type_as: None,
}
DROPOUTS = (F.dropout, torch.dropout)
TRIANGLES_KEPT = 64  # mask verdicts remembered (registered masks are few)
# Calls that turn a 0/1 table into a boolean mask, and whether the mask is the table's ones
# (True) or its zeros (False), given the number the table is compared with (None: no number).
MASK_MAKERS: dict[Any, Callable[[Any], bool | None]] = {
    **{f: (lambda n: {0: False, 1: True}.get(n) if type(n) in (int, float) else None)
       for f in (torch.eq, torch.Tensor.eq, torch.Tensor.__eq__)},
    **{f: (lambda n: {0: True, 1: False}.get(n) if type(n) in (int, float) else None)
       for f in (torch.ne, torch.Tensor.ne, torch.Tensor.__ne__)},
    **{f: (lambda n: False if n is None else None)
       for f in (torch.logical_not, torch.Tensor.logical_not, torch.Tensor.__invert__)},
    torch.Tensor.bool: lambda n: True if n is None else None,
}
DERIVED_KEPT = 64  # masks made this forward whose making was seen (one or two per layer)

PREVIOUS = object()  # in a recorded call's arguments: the value of the call before it


@dataclass(frozen=True)
class Step:
    """One recorded call; PREVIOUS in its arguments stands for the previous step's value."""

    func: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


@dataclass
class Chain:
    """What every stand-in of one q @ kᵀ shares."""

    kernel: RoutedKernel
    stats: RouteStats
    q: torch.Tensor
    k: torch.Tensor  # [B, H, S, D]: the transpose of the product's second operand
    counted: bool = False  # the chain's one call or fallback is in the report


@dataclass(frozen=True)
class State:
    scale: float = 1.0
    causal: bool = False
    probs: bool = False  # after the softmax
    dtype: torch.dtype = torch.float32


@dataclass
class _Record:
    steps: tuple[Step, ...]
    state: State
    value: torch.Tensor | None = None  # once computed


class PendingScores:
    """The scores of one q @ kᵀ (and what followed), not computed until something needs them."""

    def __init__(self, chain: Chain, steps: tuple[Step, ...], state: State) -> None:
        object.__setattr__(self, "_chain", chain)
        object.__setattr__(self, "_record", _Record(steps, state))

    # What can be answered without the values --------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        if self._record.value is not None:
            return self._record.value.shape
        q, k = self._chain.q, self._chain.k
        return torch.Size((*q.shape[:-1], k.shape[-2]))

    @property
    def dtype(self) -> torch.dtype:
        value = self._record.value
        return value.dtype if value is not None else self._record.state.dtype

    @property
    def device(self) -> torch.device:
        return self._chain.q.device

    @property
    def ndim(self) -> int:
        return 4

    @property
    def is_cuda(self) -> bool:
        return self._chain.q.is_cuda

    @property
    def requires_grad(self) -> bool:
        value = self._record.value
        if value is not None:
            return value.requires_grad
        return torch.is_grad_enabled() and (self._chain.q.requires_grad
                                            or self._chain.k.requires_grad)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return 4

    def __repr__(self) -> str:
        return f"PendingScores(shape={list(self.shape)}, {self._record.state})"

    # Everything else computes the values first -------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # dunders and our own fields (copy and pickle probe them)
            raise AttributeError(name)
        return getattr(self.values(f"scores used by {name}"), name)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        return follow_chain(func, args, kwargs or {})

    def values(self, reason: str) -> torch.Tensor:
        """The computed scores, from anywhere: through torch's function handling, so that a
        Router active here computes them with its routes off."""
        return handle_torch_function(_values, (self,), self, reason)

    def realize(self, reason: str) -> torch.Tensor:
        """The values, computed by the recorded calls (once); the report counts the chain as
        left to PyTorch, for `reason`. Called with no torch-function mode active (`values`)."""
        record = self._record
        if record.value is None:
            chain = self._chain
            if not chain.counted:
                chain.counted = True
                chain.stats.count_fallback(f"attention chain: {reason}")
            value: Any = None
            for step in record.steps:
                args = tuple(value if a is PREVIOUS else a for a in step.args)
                kwargs = {k: value if v is PREVIOUS else v for k, v in step.kwargs.items()}
                value = step.func(*args, **kwargs)
            record.value = value
        return record.value

    def then(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any],
             in_place: bool, **changes: Any) -> PendingScores:
        """The stand-in after `func(self, *args)`; in place, this one."""
        step = Step(func, tuple(PREVIOUS if a is self else a for a in args),
                    {k: PREVIOUS if v is self else v for k, v in kwargs.items()})
        record = self._record
        steps, state = (*record.steps, step), replace(record.state, **changes)
        if in_place:
            object.__setattr__(self, "_record", _Record(steps, state))
            return self
        return PendingScores(self._chain, steps, state)


def _values(scores: Any, reason: str) -> torch.Tensor:
    """`PendingScores.values` as a function torch's function handling can dispatch."""
    return scores.realize(reason) if isinstance(scores, PendingScores) else scores


def _dispatch(func: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """A method or operator of the stand-in, as torch would dispatch the tensor's: to the
    Router when one is active (which follows it with its routes off), else to `follow`."""
    relevant = tuple(a for a in args if isinstance(a, PendingScores))
    return handle_torch_function(func, relevant, *args, **kwargs)


def _operator(name: str, func: Callable[..., Any], reflected: bool = False) -> Any:
    def method(self: PendingScores, other: Any) -> Any:
        return _dispatch(func, (other, self) if reflected else (self, other), {})

    method.__name__ = name
    return method


def _method(name: str, func: Callable[..., Any]) -> Any:
    def method(self: PendingScores, *args: Any, **kwargs: Any) -> Any:
        return _dispatch(func, (self, *args), kwargs)

    method.__name__ = name
    return method


def _realizing(name: str) -> Any:
    label = name.strip("_")
    if label[:1] in "ri" and label[1:] in ("add", "sub", "truediv", "pow", "matmul"):
        label = label[1:]  # __radd__, __iadd__: an addition

    def method(self: PendingScores, *args: Any) -> Any:
        return getattr(self.values(f"scores used by {label}"), name)(*args)

    method.__name__ = name
    return method


for _name, _func in (("__mul__", torch.Tensor.mul), ("__rmul__", torch.Tensor.mul),
                     ("__truediv__", torch.Tensor.div), ("__matmul__", torch.Tensor.matmul),
                     ("__imul__", torch.Tensor.mul_), ("__itruediv__", torch.Tensor.div_)):
    setattr(PendingScores, _name, _operator(_name, _func))
PendingScores.__rmatmul__ = _operator("__rmatmul__", torch.Tensor.matmul, reflected=True)
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__rtruediv__", "__neg__",
              "__pow__", "__rpow__", "__floordiv__", "__mod__", "__abs__", "__invert__",
              "__and__", "__or__", "__xor__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__",
              "__ne__", "__getitem__", "__setitem__", "__len__", "__iter__", "__bool__",
              "__float__", "__int__", "__index__", "__contains__", "__array__",
              "__iadd__", "__isub__"):
    setattr(PendingScores, _name, _realizing(_name))
PendingScores.__hash__ = object.__hash__  # type: ignore[method-assign]
for _name, _func in (("mul", torch.Tensor.mul), ("div", torch.Tensor.div),
                     ("mul_", torch.Tensor.mul_), ("div_", torch.Tensor.div_),
                     ("masked_fill", torch.Tensor.masked_fill),
                     ("masked_fill_", torch.Tensor.masked_fill_),
                     ("softmax", torch.Tensor.softmax), ("float", torch.Tensor.float),
                     ("half", torch.Tensor.half), ("bfloat16", torch.Tensor.bfloat16),
                     ("double", torch.Tensor.double), ("to", torch.Tensor.to),
                     ("type_as", torch.Tensor.type_as), ("matmul", torch.Tensor.matmul)):
    setattr(PendingScores, _name, _method(_name, _func))
del _name, _func


# ---------------------------------------------------------------------------------------------
# Following the chain


def start_chain(kernel: RoutedKernel, func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
          stats: RouteStats) -> Outcome:
    """A Router route for q @ kᵀ: a stand-in for a product that can begin an attention."""
    if kwargs or len(args) != 2 or torch.compiler.is_compiling():
        return None, NOT_MINE
    q, k_t = args
    if not (isinstance(q, torch.Tensor) and isinstance(k_t, torch.Tensor)) or q.ndim != 4 or \
            k_t.ndim != 4 or q.shape[:2] != k_t.shape[:2] or q.shape[-1] != k_t.shape[-2] or \
            q.shape[-2] != k_t.shape[-1] or not q.is_floating_point() or q.dtype != k_t.dtype:
        return None, NOT_MINE
    chain = Chain(kernel, stats, q, k_t.transpose(-1, -2))
    return PendingScores(chain, (Step(func, (q, k_t), {}),), State(dtype=q.dtype)), DEFERRED


def holds_pending(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    return any(isinstance(a, PendingScores) for a in args) or \
        any(isinstance(a, PendingScores) for a in kwargs.values())


def realize_pending(value: Any, reason: str) -> Any:
    """`value` with every stand-in in it (a tuple, list or dict of outputs) computed; call it
    where no Router is active, or from inside one's handler."""
    if isinstance(value, PendingScores):
        return value.realize(reason)
    if isinstance(value, (tuple, list)):
        items = [realize_pending(v, reason) for v in value]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        return type(value)((k, realize_pending(v, reason)) for k, v in value.items())
    return value


def follow_chain(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """A torch call with a stand-in among its arguments: recorded, the kernel, or computed."""
    if func is _values:
        return _values(*args, **kwargs)
    pending = [a for a in (*args, *kwargs.values()) if isinstance(a, PendingScores)]
    first = pending[0]
    if len(pending) == 1 and first._record.value is None and not torch.compiler.is_compiling():
        out = _step(first, func, args, kwargs)
        if out is not NotImplemented:
            return out
    name = getattr(func, "__name__", str(func))
    args = tuple(realize_pending(a, f"scores used by {name}") for a in args)
    kwargs = {k: realize_pending(v, f"scores used by {name}") for k, v in kwargs.items()}
    return func(*args, **kwargs)


def _capturing(tensor: torch.Tensor) -> bool:
    """Is `tensor` on a CUDA stream being captured into a graph? Its values cannot be read then:
    a read synchronizes, which invalidates the capture (and, in torch 2.11, left the CUDA
    generator believing it was still capturing, so the next random draw raised)."""
    return tensor.is_cuda and torch.cuda.is_current_stream_capturing()


def _scalar(value: Any) -> float | None:
    """A positive number, or a 0-dim tensor holding one (read on the host; not while a CUDA
    graph is captured)."""
    if isinstance(value, torch.Tensor):
        if value.ndim != 0 or value.is_complex() or _capturing(value):
            return None
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value > 0 else None


def _lowest(value: Any, dtype: torch.dtype) -> bool:
    """Is `value` what a mask writes: -inf, or at most the dtype's lowest finite value?"""
    if isinstance(value, torch.Tensor):
        if value.ndim != 0 or _capturing(value):
            return False
        value = value.item()
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    lowest = torch.finfo(dtype).min if dtype.is_floating_point else -math.inf
    return value == -math.inf or value <= lowest


_TRIANGLES: dict[int, tuple[Any, tuple[Any, ...], bool]] = {}  # id(base) -> (ref, key, verdict)


def _triangle(mask: Any, seq: int, upper: bool) -> bool:
    """Is `mask` (bool, [.., S, S], leading dims 1) the strict upper triangle (`upper`) or the
    lower one with the diagonal? Judged once per mask tensor and version: a registered buffer,
    or a view of one, is checked on its first use only. A mask not judged before is no triangle
    while a CUDA graph is captured (its values cannot be read then): the chain stays PyTorch's,
    and the graph captures it as the code wrote it."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.ndim < 2 or \
            tuple(mask.shape[-2:]) != (seq, seq) or any(d != 1 for d in mask.shape[:-2]):
        return False
    derived = _DERIVED.get(id(mask))
    if derived is not None and derived[0]() is mask and derived[1] == mask._version:
        return derived[2] == ("upper" if upper else "lower")
    base = mask._base if mask._base is not None else mask
    key = (mask.storage_offset(), tuple(mask.shape), tuple(mask.stride()), base._version, upper)
    known = _TRIANGLES.get(id(base))
    if known is not None and known[0]() is base and known[1] == key:
        return known[2]
    if _capturing(mask):
        return False
    ones = torch.ones(seq, seq, dtype=torch.bool, device=mask.device)
    expected = ones.triu(1) if upper else ones.tril()
    verdict = bool(torch.equal(mask.reshape(seq, seq), expected))
    if len(_TRIANGLES) >= TRIANGLES_KEPT:
        _TRIANGLES.clear()
    _TRIANGLES[id(base)] = (weakref.ref(base), key, verdict)
    return verdict


_TABLES: dict[int, tuple[Any, tuple[Any, ...], str | None]] = {}  # id(base) -> (ref, key, kind)
# id(mask) -> (ref, version, "upper" / "lower" / None)
_DERIVED: dict[int, tuple[Any, int, str | None]] = {}


def _table_kind(table: torch.Tensor) -> str | None:
    """Is `table` ([.., S, S], leading dims 1, values 0 and 1 or bool) the lower triangle with
    the diagonal ("lower"), the strict upper one ("upper"), or neither (None)? Read once per
    table tensor and version, like `_triangle`, and never while a CUDA graph is captured."""
    if table.ndim < 2 or table.shape[-1] != table.shape[-2] or \
            any(d != 1 for d in table.shape[:-2]) or table.is_complex():
        return None
    base = table._base if table._base is not None else table
    key = (table.storage_offset(), tuple(table.shape), tuple(table.stride()), base._version,
           table.dtype)
    known = _TABLES.get(id(base))
    if known is not None and known[0]() is base and known[1] == key:
        return known[2]
    if _capturing(table):
        return None
    seq = table.shape[-1]
    square = table.reshape(seq, seq)
    ones = torch.ones(seq, seq, dtype=torch.bool, device=table.device)
    kind = None
    if bool(((square == 0) | (square == 1)).all()):
        present = square != 0
        kind = ("lower" if torch.equal(present, ones.tril()) else
                "upper" if torch.equal(present, ones.triu(1)) else None)
    if len(_TABLES) >= TRIANGLES_KEPT:
        _TABLES.clear()
    _TABLES[id(base)] = (weakref.ref(base), key, kind)
    return kind


def note_mask(kernel: RoutedKernel, func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
              stats: RouteStats) -> Outcome:
    """A Router route for the calls that make a causal mask from a 0/1 table (minGPT's and
    nanoGPT's `bias[:, :, :T, :T] == 0`): computed as written, and the mask's kind remembered
    from the table's, so that a mask made anew each forward is known without reading it (no
    synchronization per forward, and none while a CUDA graph is captured)."""
    if torch.compiler.is_compiling():
        return None, NOT_MINE  # the chain is left to the compiler there
    out = func(*args, **kwargs)
    if kwargs or not args or len(args) > 2 or type(out) is not torch.Tensor or \
            out.dtype != torch.bool or not isinstance(args[0], torch.Tensor):
        return out, DEFERRED
    number = args[1] if len(args) == 2 else None
    keeps_ones = MASK_MAKERS[func](number)
    if keeps_ones is None:
        return out, DEFERRED
    kind = _table_kind(args[0])
    if kind is not None and not keeps_ones:
        kind = "upper" if kind == "lower" else "lower"
    if len(_DERIVED) >= DERIVED_KEPT:
        _DERIVED.clear()
    _DERIVED[id(out)] = (weakref.ref(out), out._version, kind)
    return out, DEFERRED


def _bound(names: tuple[str, ...], args: tuple[Any, ...],
           kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    if len(args) > len(names) or any(k not in names for k in kwargs):
        return None
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in bound:
            return None
        bound[k] = v
    return bound


def _step(p: PendingScores, func: Any, args: tuple[Any, ...],
          kwargs: Mapping[str, Any]) -> Any:
    """The stand-in after this call, the attention's output, or NotImplemented (compute)."""
    state = p._record.state
    original = IN_PLACE.get(func, func)
    in_place = original is not func
    seq = p._chain.q.shape[-2]
    if original in SCALES:
        if state.probs or kwargs or len(args) != 2 or (not SCALES[original] and args[0] is not p):
            return NotImplemented
        value = _scalar(args[1] if args[0] is p else args[0])
        if value is None:
            return NotImplemented
        scale = state.scale * value if SCALES[original] else state.scale / value
        return p.then(original, args, kwargs, in_place, scale=scale)
    if original in MASKED_FILLS:
        bound = _bound(("input", "mask", "value"), args, kwargs)
        if bound is None or bound.get("input") is not p or state.probs or state.causal:
            return NotImplemented
        if not (_lowest(bound.get("value"), state.dtype)
                and _triangle(bound.get("mask"), seq, upper=True)):
            return NotImplemented
        return p.then(original, args, kwargs, in_place, causal=True)
    if func is torch.where:
        bound = _bound(("condition", "input", "other"), args, kwargs)
        if bound is None or bound.get("input") is not p or state.probs or state.causal:
            return NotImplemented
        if not (_lowest(bound.get("other"), state.dtype)
                and _triangle(bound.get("condition"), seq, upper=False)):
            return NotImplemented
        return p.then(func, args, kwargs, False, causal=True)
    if func in SOFTMAXES:
        bound = _bound(SOFTMAXES[func], args, kwargs)
        if bound is None or bound.get("input") is not p or state.probs:
            return NotImplemented
        dim, dtype = bound.get("dim"), bound.get("dtype")
        if dim not in (-1, 3) or not (dtype is None or (isinstance(dtype, torch.dtype)
                                                        and dtype.is_floating_point)):
            return NotImplemented
        return p.then(func, args, kwargs, False, probs=True, dtype=dtype or state.dtype)
    if func in CASTS:
        dtype = _cast_dtype(func, args, kwargs, p)
        return NotImplemented if dtype is None else p.then(func, args, kwargs, False,
                                                             dtype=dtype)
    if func in DROPOUTS:
        bound = _bound(("input", "p", "training", "inplace") if func is not torch.dropout
                       else ("input", "p", "train"), args, kwargs)
        if bound is None or bound.get("input") is not p:
            return NotImplemented
        training = bound.get("training", bound.get("train", True))
        return p if not training or bound.get("p", 0.5) == 0 else NotImplemented
    if func in CHAIN_STARTS and state.probs and len(args) == 2 and args[0] is p and not kwargs:
        return _attend(p, func, args[1])
    return NotImplemented


def _cast_dtype(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                p: PendingScores) -> torch.dtype | None:
    fixed = CASTS[func]
    if fixed is not None:
        return fixed if len(args) == 1 and not kwargs else None
    if func is torch.Tensor.type_as:
        other = args[1] if len(args) == 2 else None
        ok = isinstance(other, torch.Tensor) and other.device == p.device and not kwargs
        return other.dtype if ok else None
    # Tensor.to(dtype) / to(dtype=...): a dtype and nothing else
    if len(args) == 2 and not kwargs and isinstance(args[1], torch.dtype):
        return args[1]
    if len(args) == 1 and set(kwargs) == {"dtype"} and isinstance(kwargs["dtype"], torch.dtype):
        return kwargs["dtype"]
    return None


def _attend(p: PendingScores, func: Any, v: Any) -> Any:
    """softmax(...) @ v: the kernel when the chain is what it computes, else the chain's values."""
    chain, state = p._chain, p._record.state
    q, k, kernel = chain.q, chain.k, chain.kernel
    why = None
    if not isinstance(v, torch.Tensor) or v.shape != q.shape or k.shape != q.shape:
        why = "q, k, v shapes differ"
    elif state.dtype != q.dtype or v.dtype != q.dtype:
        why = "dtype changes along the chain"
    else:
        why = call_refusal(kernel, q, k, v) or _verified(kernel, state, q.shape[-1])
    if why is None:
        default = q.shape[-1] ** -0.5
        scale = None if math.isclose(state.scale, default, rel_tol=1e-6) else state.scale
        out, why = call_kernel(kernel, q, k, v, state.causal, scale)
        if why is None:
            chain.counted = True
            chain.stats.count_call()
            return out
    return func(p.realize(why), v)


def _verified(kernel: RoutedKernel, state: State, head_dim: int) -> str | None:
    """Why the chain's causal flag or scale is not what the harness verified the kernel with."""
    causal = bool(kernel.params.get("causal", True))
    if state.causal != causal:
        return f"causal={state.causal} (verified: {causal})"
    return attention_scale_unverified(kernel, state.scale, head_dim)
