"""The delivered model: a run's chosen kernels in the delivery mode `autokernel verify` measured
fastest, applied to a user's model by `autokernel.load(DIR).optimize(model)` (and the exported
module's `optimize(model)`).

Four modes, each with the kernels in-context selection chose for it (`ablation.py`; the graph
modes judged by device time, since a replay has no host cost per forward):

- `eager`: the model's own forward with the kernels routed in (`patch_model`);
- `cuda-graph`: the same forward captured once per input signature in a CUDA graph and replayed
  (`GraphedForward`): no host cost per forward at all, for static-shape inference;
- `compile`: `torch.compile(model)` with the kernels in the compiled graph as custom ops or
  triton_ops (the others left to Inductor), explicit attention chains included
  (`compile_with_kernels`, `compiled_attention.py`);
- `reduce-overhead`: the same under `torch.compile(mode="reduce-overhead")`, Inductor's CUDA
  graphs.

A `Delivery` is the JSON-able choice (mode and kernel tags), saved in verify.json and carried by
the export. This file imports only torch (and the integrate modules above), because
`autokernel export` inlines it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from autokernel.integrate.compiled_attention import AttentionChainPass
from autokernel.integrate.patch import Patch, patch_model
from autokernel.integrate.routing import RoutedKernel

EAGER, CUDA_GRAPH, COMPILE, REDUCE_OVERHEAD = "eager", "cuda-graph", "compile", "reduce-overhead"
DELIVERY_MODES = (EAGER, CUDA_GRAPH, COMPILE, REDUCE_OVERHEAD)
# Which configurations' timings stand for each delivery's kernels: a CUDA graph replays the eager
# forward's kernels, reduce-overhead the compiled forward's (each mode still has its own selection,
# the graph modes judged by device time alone).
KERNEL_MODE = {EAGER: EAGER, CUDA_GRAPH: EAGER, COMPILE: COMPILE, REDUCE_OVERHEAD: COMPILE}
MAX_GRAPHS = 8  # input signatures captured by one GraphedForward; more run the plain forward


@dataclasses.dataclass(frozen=True)
class Delivery:
    mode: str
    kernels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in DELIVERY_MODES:
            raise ValueError(f"unknown delivery mode {self.mode!r}; choose one of "
                             f"{', '.join(DELIVERY_MODES)}")

    @property
    def label(self) -> str:
        kernels = "+".join(self.kernels) if self.kernels else "no kernel"
        return f"{self.mode} ({kernels})"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "kernels": list(self.kernels)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Delivery:
        return cls(str(data["mode"]), tuple(str(t) for t in data.get("kernels", ())))


def _signature(value: Any) -> Any:
    """A hashable key for one forward argument: a tensor's shape, strides, dtype and device; a
    plain value itself; None when the argument cannot be part of a graph's key."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.stride(), value.dtype, value.device)
    if isinstance(value, (tuple, list)):
        parts = tuple(_signature(v) for v in value)
        return None if None in parts else (type(value).__name__, parts)
    if isinstance(value, (int, float, bool, str, type(None))):
        return ("value", value)
    return None


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _in_order(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors of a call's arguments, keyword ones in name order (as the graph's key)."""
    return _tensors((args, [kwargs[name] for name in sorted(kwargs)]))


def _cloned(value: Any) -> Any:
    """The graph's static outputs, copied: the next replay overwrites them."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple):
        return tuple(_cloned(v) for v in value)
    if isinstance(value, list):
        return [_cloned(v) for v in value]
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    return value


def settle_failed_capture(device: Any = None) -> None:
    """After a CUDA graph capture that raised (a forward that synchronizes or reads a value on
    the host): wait for the device, then capture an empty graph.

    A failed capture can leave the device's CUDA generator in capture mode: on an H200 (torch
    2.11) the next random draw there, a model built on the device (nn.Linear's init), raised
    "Offset increment outside graph capture encountered unexpectedly" and verify stopped. A
    capture that begins and ends cleanly takes the generator through its prologue and epilogue
    again. Best effort: whatever fails here fails quietly (the caller already has its reason)."""
    try:
        torch.cuda.synchronize(device)
    except Exception:
        pass
    try:
        with torch.cuda.device(device), torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass
    except Exception:
        pass


class _Graph:
    """One captured forward: static inputs to copy into, the graph, its static outputs."""

    def __init__(self, forward: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any], pool: Any) -> None:
        self.args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        self.kwargs = {k: (v.clone() if isinstance(v, torch.Tensor) else v)
                       for k, v in kwargs.items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # lazy state (workspaces, autotuning) before capture
            forward(*self.args, **self.kwargs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.outputs = forward(*self.args, **self.kwargs)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        for static, given in zip(_in_order(self.args, self.kwargs), _in_order(args, kwargs)):
            static.copy_(given)
        self.graph.replay()
        return _cloned(self.outputs)


class GraphedForward(nn.Module):
    """`model`'s inference forward, captured in a CUDA graph per input signature and replayed.

    Used only where a graph is safe: CUDA tensors in, no autograd wanted (grad mode off, or
    nothing requiring a gradient), arguments that make a key (tensors, plain values), at most
    MAX_GRAPHS signatures, and a forward that captures (no host synchronization). Anything else
    runs the plain forward. Outputs are copies, so they outlive the next call."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self._graphs: dict[Any, _Graph | None] = {}
        self._pool: Any = None

    def _replayable(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tensors = _tensors((args, kwargs))
        if not tensors or any(not t.is_cuda for t in tensors):
            return None
        if torch.is_grad_enabled() and (any(t.requires_grad for t in tensors) or any(
                p.requires_grad for p in self.model.parameters())):
            return None
        key = _signature((args, tuple(sorted(kwargs.items()))))
        return key

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        key = self._replayable(args, kwargs)
        if key is None:
            return self.model(*args, **kwargs)
        if key not in self._graphs:
            if len(self._graphs) >= MAX_GRAPHS:
                return self.model(*args, **kwargs)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            try:
                with torch.no_grad():
                    self._graphs[key] = _Graph(self.model, args, kwargs, self._pool)
            except Exception:  # a forward that synchronizes or copies to the host
                settle_failed_capture()
                self._graphs[key] = None
        graph = self._graphs[key]
        if graph is None:
            return self.model(*args, **kwargs)
        return graph(args, kwargs)


def compile_with_kernels(model: nn.Module, patch: Patch | None, mode: str = COMPILE,
                         backend: str = "inductor") -> Callable[..., Any]:
    """`torch.compile` of a model patched with `under_compile="kernels"`, with its kernels in the
    graph: the one place deliveries and verify's compile-mode ablation compile models (`patch`
    None: a model without kernels, plain torch.compile).

    The routes put their kernels into the graph as Dynamo traces them; an explicit attention
    chain has no route under the compiler (`attention_chain.py`), so when a flash_attention
    kernel goes into compiled graphs, Inductor's pre-grad pass `AttentionChainPass` replaces
    the chains with its op. `mode` is COMPILE or REDUCE_OVERHEAD (Inductor, whatever `backend`
    says, as before). Another backend than Inductor runs no Inductor pass: the chains then
    compile as written."""
    inductor = mode == REDUCE_OVERHEAD or backend == "inductor"
    attention = [k for k in (patch.kernels if patch is not None else ())
                 if k.in_compiled_graphs and k.kernel_type == "flash_attention"]
    if not (inductor and attention):
        if mode == REDUCE_OVERHEAD:
            return torch.compile(model, mode="reduce-overhead")
        return torch.compile(model, backend=backend)
    options: dict[str, Any] = {"pre_grad_custom_pass": AttentionChainPass(attention)}
    if mode == REDUCE_OVERHEAD:  # torch.compile takes a mode or options, not both
        options.update(torch._inductor.list_mode_options("reduce-overhead"))
    return torch.compile(model, options=options)


@dataclasses.dataclass
class Delivered:
    """A model made ready for one delivery: call `model`; `patch.unpatch()` undoes the routing
    (a compiled or graphed wrapper then still holds what it compiled or captured)."""

    model: Callable[..., Any]
    patch: Patch
    delivery: Delivery

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)


def deliver(model: nn.Module, kernels: Iterable[RoutedKernel], delivery: Delivery,
            compile_backend: str = "inductor") -> Delivered:
    """`model` with `delivery.kernels` routed in (in place, like `patch_model`), wrapped for
    `delivery.mode`. The kernels go into compiled graphs in the compile modes."""
    chosen = [k for k in kernels if k.tag in delivery.kernels]
    missing = set(delivery.kernels) - {k.tag for k in chosen}
    if missing:
        raise ValueError(f"the delivery names kernels that are not loaded: {sorted(missing)}")
    patch = patch_model(model, chosen, under_compile="kernels")
    runnable: Callable[..., Any] = model
    if delivery.mode == CUDA_GRAPH:
        runnable = GraphedForward(model)
    elif delivery.mode in (COMPILE, REDUCE_OVERHEAD):
        runnable = compile_with_kernels(model, patch, delivery.mode, compile_backend)
    return Delivered(runnable, patch, delivery)
