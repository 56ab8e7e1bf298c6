"""Compile-transparent kernels: a kernel file's kernel_fn as a `torch.library.triton_op`.

A `custom_op` is opaque to torch.compile: Inductor sees one call it cannot look into, so it
neither fuses around the kernel nor schedules it with its neighbours. A `triton_op` is the
same kind of operator in eager mode, but when AOTAutograd traces a compiled graph it runs the
op's Python body under fake tensors, and every Triton launch made through
`torch.library.wrap_triton(kernel)[grid](...)` becomes a `triton_kernel_wrapper_*` node that
Inductor compiles and schedules like its own kernels.

Kernel files do not call `wrap_triton` (they are plain Triton, run by the harness outside any
torch.library op). So while the op's body is being *traced* (never in eager calls, which run
kernel_fn untouched), `launching_through_wrap_triton(module)` makes the kernel module's host code
traceable without editing it:

- every `@triton.jit` object of the module launches through `wrap_triton`: its class is swapped,
  for the duration of the trace, for a subclass whose `kernel[grid]` is `wrap_triton(kernel)[grid]`
  and whose ahead-of-time `warmup(...)` returns None (a starter then takes its plain
  `kernel[grid](...)` launch instead of a precompiled `CompiledKernel`, which no tracer can see);
  the object itself stays the same, so the graph records the module's real kernel;
- every `functools.lru_cache` of the module is bypassed (the cached launch plans hold compiled
  kernels and would be filled with traced values otherwise).

The kernel modules are private to their op (`load_kernel_module` makes one per kernel), so the
swap touches nothing else; it is undone when the trace of the body returns or raises.

Which path a kernel takes is decided when it is registered (`compile_path`): a trace of the body
with `make_fx` on fake tensors, from the op entry's `Integration.example` arguments, must finish
and launch at least one Triton kernel through `wrap_triton`. Host code that cannot be traced (a
`.data_ptr()` or `.item()` on the path, a launcher object other than a `@triton.jit` or
`@triton.autotune` kernel, data-dependent host logic) fails that trace and the kernel stays a
`custom_op`, with the reason in the patch report. Under the Triton interpreter (CPU) the kernels
are `InterpretedFunction`s, which `wrap_triton` cannot capture, so the automatic choice there is
always `custom_op`; `compile_transparent=True` forces a `triton_op` anyway (eager calls and
Dynamo's graph capture work; AOTAutograd's trace of the body does not).

This file imports only torch (and triton lazily), because `autokernel export` inlines it.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

TRITON_OP, CUSTOM_OP = "triton_op", "custom_op"
TRANSPARENT_LABEL = "compile-transparent (triton_op)"

_SCHEMA_TYPES: dict[str, Any] = {"Tensor": torch.Tensor, "float": float, "int": int,
                                 "str": str, "bool": bool}


def compile_path_label(path: str, reason: str | None) -> str:
    """How the patch report and verify name a kernel's way into compiled graphs."""
    if path == TRITON_OP:
        return TRANSPARENT_LABEL
    return f"opaque to torch.compile (custom_op: {reason or 'chosen'})"


# ---------------------------------------------------------------------------------------------
# Tracing a kernel module's host code


def _jit_classes() -> tuple[type, ...]:
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    return (JITFunction, Autotuner)


@functools.lru_cache(maxsize=None)
def _traced_class(cls: type) -> type:
    """`cls` whose `[grid]` launches go through wrap_triton and whose warmup compiles nothing."""

    def __getitem__(self: Any, grid: Any) -> Any:
        from torch.library import wrap_triton

        wrapped = wrap_triton(self)
        if wrapped is self:  # wrap_triton is switched off (an eager call): launch as written
            return cls.__getitem__(self, grid)
        return wrapped[grid]

    def warmup(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    return type(f"WrapTriton{cls.__name__}", (cls,), {"__getitem__": __getitem__,
                                                      "warmup": warmup})


@contextmanager
def launching_through_wrap_triton(module: types.ModuleType) -> Iterator[None]:
    """While inside, the module's Triton kernels launch through wrap_triton and its lru_caches
    are bypassed (see the module doc)."""
    jit_classes = _jit_classes()
    swapped: list[tuple[Any, type]] = []
    bypassed: dict[str, Any] = {}
    namespace = module.__dict__
    try:
        for name, value in list(namespace.items()):
            if isinstance(value, jit_classes):
                swapped.append((value, type(value)))
                value.__class__ = _traced_class(type(value))
            elif isinstance(value, functools._lru_cache_wrapper):
                bypassed[name] = value
                namespace[name] = value.__wrapped__
        yield
    finally:
        namespace.update(bypassed)
        for kernel, cls in swapped:
            kernel.__class__ = cls


def _wrap_triton_enabled() -> bool:
    """False inside a triton_op's eager call (the op switches wrap_triton off for real tensors)."""
    check = getattr(getattr(torch, "_library").triton, "is_wrap_triton_enabled", None)
    return True if check is None else bool(check())


def traceable_body(kernel_fn: Callable[..., Any], module: types.ModuleType
                   ) -> Callable[..., Any]:
    """kernel_fn, launching through wrap_triton when it is traced (eager calls run it as is)."""

    def body(*args: Any) -> Any:
        if not _wrap_triton_enabled():
            return kernel_fn(*args)
        with launching_through_wrap_triton(module):
            return kernel_fn(*args)

    return body


def untraceable_reason(body: Callable[..., Any], example: tuple[Any, ...]) -> str | None:
    """Why `body` cannot be traced into a graph of Triton launches at `example`, or None.

    make_fx on fake tensors runs the host code as AOTAutograd will (no kernel runs); the trace
    must finish and record at least one `wrap_triton` launch."""
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        graph = make_fx(body, tracing_mode="fake")(*example)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"host code does not trace: {type(exc).__name__}: {first[:120]}"
    launches = [n for n in graph.graph.nodes
                if "triton_kernel_wrapper" in str(getattr(n, "target", ""))]
    if not launches:
        return "no Triton launch seen while tracing its host code"
    return None


# ---------------------------------------------------------------------------------------------
# Registration


def schema_signature(schema: str) -> inspect.Signature:
    """A Python signature with the annotations `torch.library` infers `schema` back from."""
    parsed = torch._C.parse_schema(f"{'autokernel'}::probe{schema}")
    parameters = []
    for argument in parsed.arguments:
        text = str(argument.type)
        optional = text.startswith("Optional[")
        base = _SCHEMA_TYPES.get(text.removeprefix("Optional[").removesuffix("]"))
        if base is None:
            raise ValueError(f"schema type {text} has no Python annotation here")
        annotation = base | None if optional else base
        default = (argument.default_value if argument.has_default_value()
                   else inspect.Parameter.empty)
        parameters.append(inspect.Parameter(argument.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            default=default, annotation=annotation))
    # "-> (Tensor, Tensor)": a tuple of that many tensors (add_rmsnorm's (y, h)).
    count = len(parsed.returns)
    returns = torch.Tensor if count == 1 else tuple[(torch.Tensor,) * count]  # type: ignore[misc]
    return inspect.Signature(parameters, return_annotation=returns)


def define_triton_op(qualname: str, body: Callable[..., torch.Tensor], schema: str) -> Any:
    """`torch.library.triton_op(qualname)` over `body`, with the op entry's schema (triton_op
    infers its schema from the function's annotations, so the body gets them from `schema`)."""

    def implementation(*args: Any) -> torch.Tensor:
        return body(*args)

    implementation.__signature__ = schema_signature(schema)  # type: ignore[attr-defined]
    implementation.__annotations__ = {
        p.name: p.annotation for p in implementation.__signature__.parameters.values()}
    implementation.__annotations__["return"] = implementation.__signature__.return_annotation
    op = torch.library.triton_op(qualname, implementation, mutates_args=())
    # torch.library infers `int` as SymInt, which takes the same Python ints.
    registered = str(op._opoverload._schema).partition("(")[2].replace("SymInt", "int")
    wanted = str(torch._C.parse_schema(f"autokernel::probe{schema}")).partition("(")[2]
    if registered != wanted:
        raise ValueError(f"triton_op inferred ({registered}, not ({wanted}")
    return op
