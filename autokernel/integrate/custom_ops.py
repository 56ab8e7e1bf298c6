"""Each finished kernel as a `torch.library` custom op: eager, `torch.compile` and autograd.

A custom op is opaque to `torch.compile`: Dynamo records one call, Inductor leaves the Triton
kernel alone, and the fake implementation below tells the compiler the output's shape and dtype
without running anything. Where a kernel's host code can be traced, it is registered as a
`torch.library.triton_op` instead, whose Triton launches Inductor sees and fuses around
(`triton_ops.py`); `KernelOp.compile_path` says which one a kernel got, and why not the first.
Autograd goes through `register_autograd`, with one of two backwards per kernel type
(`INTEGRATION.backward` in its op entry, `autokernel/ops/<type>.py`):

- "analytic": a closed-form gradient written with PyTorch ops (matmul, softmax, cross_entropy,
  rotary_embedding, reduce). Cheap, and exact up to rounding;
- "recompute": backward re-runs the op's PyTorch reference from the saved inputs under autograd
  and differentiates that (rmsnorm, layernorm, fused_mlp with the reference oracles;
  flash_attention with F.scaled_dot_product_attention, whose backward never materializes the S×S
  score matrix the reference builds). It costs one extra reference forward per backward, and
  gives the gradient of the reference, which the kernel matches within the harness's tolerance.

The forward is always the optimized kernel; no backward uses a Triton kernel of ours. Each
kernel type's schema, fake and backward come from its op entry's `Integration`.

This file imports only torch (and the kernel files it is handed), because `autokernel export`
inlines it into a self-contained module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import linecache
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from autokernel.integrate.integration import Integration  # inlined before this by export
from autokernel.integrate.triton_ops import (  # inlined before this by export
    CUSTOM_OP,
    TRITON_OP,
    compile_path_label,
    define_triton_op,
    traceable_body,
    untraceable_reason,
)

OP_NAMESPACE = "autokernel"

BACKWARD_DESCRIPTION: dict[str, str] = {
    "analytic": "analytic backward (closed-form gradient in PyTorch ops)",
    "recompute": "backward recomputes the PyTorch reference under autograd",
}


# ---------------------------------------------------------------------------------------------
# Kernel files as modules


def load_kernel_module(module_name: str, source: str, filename: str) -> types.ModuleType:
    """Execute a kernel file's source as a fresh module named `module_name`.

    The source goes into linecache under `filename`, so `@triton.jit` (which reads its function's
    source through `inspect`) and tracebacks work for sources that live in no file, as in an
    exported module. Whether Triton interprets the kernels on the CPU is decided here, at
    decoration time, by TRITON_INTERPRET.
    """
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(module_name)
    module.__file__ = filename
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        exec(compile(source, filename, "exec"), module.__dict__)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def interpreting() -> bool:
    """Whether Triton kernels decorated now run in the interpreter (on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


# ---------------------------------------------------------------------------------------------
# Fakes and backwards shared by several kernel types (each op entry's INTEGRATION picks its own)


def fake_like_first(x: torch.Tensor, *rest: Any) -> torch.Tensor:
    """The output of an op whose result has its first input's shape and dtype."""
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _save_inputs(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """Save every tensor input (and the output, or each of a tuple of them); remember where the
    non-tensors go."""
    ctx.tensor_positions = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)]
    ctx.constants = {i: a for i, a in enumerate(inputs) if not isinstance(a, torch.Tensor)}
    ctx.arity = len(inputs)
    outputs = tuple(output) if isinstance(output, (tuple, list)) else (output,)
    ctx.outputs = len(outputs) if isinstance(output, (tuple, list)) else 0  # 0: one tensor
    ctx.save_for_backward(*(inputs[i] for i in ctx.tensor_positions), *outputs)


def saved_inputs(ctx: Any) -> tuple[list[Any], Any]:
    """(the op's inputs in order, its output: a tensor, or a tuple for an op with several) from
    what `_save_inputs` kept."""
    count = getattr(ctx, "outputs", 0)
    saved = ctx.saved_tensors
    tensors, outputs = saved[:len(saved) - max(count, 1)], saved[len(saved) - max(count, 1):]
    args: list[Any] = [None] * ctx.arity
    for position, tensor in zip(ctx.tensor_positions, tensors):
        args[position] = tensor
    for position, value in ctx.constants.items():
        args[position] = value
    return args, (tuple(outputs) if count else outputs[0])


def _recompute_backward(recompute: Callable[..., torch.Tensor]) -> Callable[..., tuple[Any, ...]]:
    """A backward that differentiates `recompute` (a PyTorch path) at the saved inputs."""

    def backward(ctx: Any, *output_grads: torch.Tensor | None) -> tuple[Any, ...]:
        args, _ = saved_inputs(ctx)
        wanted = [i for i, a in enumerate(args)
                  if isinstance(a, torch.Tensor) and ctx.needs_input_grad[i]]
        grads: list[Any] = [None] * len(args)
        if not wanted:
            return tuple(grads)
        with torch.enable_grad():
            leaves = list(args)
            for i in wanted:
                leaves[i] = args[i].detach().requires_grad_(True)
            out = recompute(*leaves)
            # Several outputs (add_rmsnorm's (y, h)): each with its incoming gradient, those
            # autograd left out (an output nothing used) skipped.
            outs = out if isinstance(out, (tuple, list)) else (out,)
            pairs = [(o, g) for o, g in zip(outs, output_grads) if g is not None]
            computed = torch.autograd.grad([o for o, _ in pairs], [leaves[i] for i in wanted],
                                           [g for _, g in pairs], allow_unused=True)
        for i, g in zip(wanted, computed):
            grads[i] = g
        return tuple(grads)

    return backward


def backward_for(integration: Integration,
                 reference: Callable[..., torch.Tensor] | None) -> Callable[..., Any]:
    if integration.backward == "analytic" and integration.gradient is not None:
        return integration.gradient
    recompute = integration.recompute or reference
    if integration.backward != "recompute" or recompute is None:
        raise ValueError(f"no backward: {integration.backward!r} needs a gradient or a reference")
    return _recompute_backward(recompute)


# ---------------------------------------------------------------------------------------------
# Registration


@dataclass(frozen=True)
class KernelOp:
    """One registered kernel: call `op(*args)` with the reference's positional arguments.

    `direct` is the same kernel without the custom-op dispatch (autograd, fake tensors), for eager
    calls that need neither: the dispatcher's Python round trip costs several times a small
    kernel's launch, which a model's eager forward would pay on every routed call.
    """

    kernel_type: str
    qualname: str  # "autokernel::rmsnorm_3f2a9c1d07"
    op: Callable[..., torch.Tensor]
    backward: str  # "analytic" or "recompute"
    device_type: str  # "cuda", or "cpu" when the kernels run in the Triton interpreter
    direct: Callable[..., torch.Tensor] | None = None
    integration: Integration | None = None  # the op entry's schema, backward and routes
    compile_path: str = CUSTOM_OP  # TRITON_OP: Inductor sees its launches; CUSTOM_OP: opaque
    opaque_reason: str | None = None  # why a custom_op is not a triton_op
    # The kernel file's kernel_fn as written (the bare launch verify times routed calls against)
    kernel_fn: Callable[..., Any] | None = None

    @property
    def compile_label(self) -> str:
        return compile_path_label(self.compile_path, self.opaque_reason)


def op_name(kernel_type: str, source: str, device_type: str, path: str = CUSTOM_OP) -> str:
    """A name that changes with the kernel's source, build and registration path, so two
    versions never collide."""
    build = device_type if path == CUSTOM_OP else f"{device_type}\0{path}"
    digest = hashlib.sha1(f"{kernel_type}\0{build}\0{source}".encode()).hexdigest()[:12]
    return f"{kernel_type}_{digest}"


def _existing_op(name: str) -> Callable[..., torch.Tensor] | None:
    namespace = getattr(torch.ops, OP_NAMESPACE)
    try:
        return getattr(namespace, name).default
    except (AttributeError, RuntimeError):
        return None


def _unaliased(out: Any, inputs: tuple[Any, ...]) -> Any:
    """A custom op may not return (a view of) one of its inputs, nor one output twice; copy in
    that rare case (each of a tuple of outputs). Every routed call pays this check, so each
    non-empty input's storage is looked up once, not once per output; a single output (most
    kernels') is checked inline, without the set."""
    if type(out) is torch.Tensor:
        try:
            if not out.numel():
                return out
            pointer = out.untyped_storage().data_ptr()
            for a in inputs:
                if isinstance(a, torch.Tensor) and a.numel() and \
                        a.untyped_storage().data_ptr() == pointer:
                    return out.clone()
            return out
        except RuntimeError:  # a storage that is not real (`_storage_pointer`): the long way
            pass
    elif type(out) is tuple and _fresh_outputs(out, inputs):
        return out  # several outputs (add_rmsnorm's y, h), each in a storage of its own
    taken = {_storage_pointer(a) for a in inputs if isinstance(a, torch.Tensor) and a.numel()}
    taken.discard(None)
    return _fresh(out, taken)


def _fresh_outputs(outputs: tuple[Any, ...], inputs: tuple[Any, ...]) -> bool:
    """Whether a tuple of tensors needs no copy: no two share a storage, none shares an input's
    (the common case, answered without `_fresh`'s set per call). False when unsure."""
    try:
        pointers = []
        for out in outputs:
            if type(out) is not torch.Tensor:
                return False
            if out.numel():
                pointers.append(out.untyped_storage().data_ptr())
        if len(set(pointers)) != len(pointers):
            return False
        for a in inputs:
            if isinstance(a, torch.Tensor) and a.numel() and \
                    a.untyped_storage().data_ptr() in pointers:
                return False
        return True
    except RuntimeError:  # a storage that is not real (`_storage_pointer`)
        return False


def _storage_pointer(tensor: torch.Tensor) -> int | None:
    """Where the tensor's storage lives, or None for one without a real storage: Inductor runs
    the op on functional tensors while it compiles, and their storage raises on `data_ptr()`
    (and functionalization handles aliasing there anyway)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except RuntimeError:
        return None


def _fresh(out: Any, taken: set[int]) -> Any:
    """`out`, cloned where it shares a storage in `taken`; adds what it keeps to `taken`."""
    if isinstance(out, (tuple, list)):
        return tuple(_fresh(one, taken) for one in out)
    if not out.numel():
        return out
    pointer = _storage_pointer(out)
    if pointer is None:
        return out
    if pointer in taken:
        out = out.clone()
        pointer = out.untyped_storage().data_ptr()
    taken.add(pointer)
    return out


# Trailing arguments added to a schema after kernels were written for it (reduce, softmax and
# rmsnorm's axis; reduce's op; fused_mlp's activation), at the values that mean what those
# kernels already do (over the last dim; a sum; SwiGLU).
LEGACY_TRAILING: dict[str, Any] = {"axis": -1, "op": "sum", "activation": "silu"}
LEGACY_TRAILING_DEFAULTS = tuple(LEGACY_TRAILING.values())


def _kernel_fn_arity(kernel_fn: Callable[..., Any]) -> int | None:
    """How many positional arguments kernel_fn takes; None when any number (*args) or unknown."""
    try:
        parameters = inspect.signature(kernel_fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def _fitted(args: tuple[Any, ...], arity: int | None) -> tuple[Any, ...]:
    """The op's arguments for a kernel_fn written before its schema's trailing axis argument: a
    kernel.py of an older run takes (x) where the op now passes (x, -1). Dropped only at the
    value that kernel already computes; any other axis is a call it cannot make."""
    if arity is None or len(args) <= arity:
        return args
    if any(a not in LEGACY_TRAILING_DEFAULTS for a in args[arity:]):
        raise ValueError(f"this kernel_fn takes {arity} arguments, not an axis")
    return args[:arity]


def choose_compile_path(kernel_fn: Callable[..., torch.Tensor], module: types.ModuleType | None,
                        integration: Integration, device_type: str,
                        compile_transparent: bool | None,
                        dtype: torch.dtype = torch.float16) -> tuple[str, str | None]:
    """(TRITON_OP or CUSTOM_OP, why not a triton_op). `compile_transparent`: None decides by
    tracing the host code on the op entry's example; True takes a triton_op without the check
    (where a module is known); False keeps the custom_op."""
    if compile_transparent is False:
        return CUSTOM_OP, "compile_transparent=False"
    if module is None:
        return CUSTOM_OP, "no kernel module to trace"
    if compile_transparent:
        return TRITON_OP, None
    if interpreting():
        return CUSTOM_OP, "Triton interpreter: wrap_triton cannot capture interpreted kernels"
    if integration.example is None:
        return CUSTOM_OP, "no example inputs in its op entry to trace the host code with"
    example = tuple(a.to(device_type) if isinstance(a, torch.Tensor) else a
                    for a in integration.example(dtype))
    why = untraceable_reason(traceable_body(kernel_fn, module), example)
    return (CUSTOM_OP, why) if why else (TRITON_OP, None)


def register_kernel(kernel_type: str, kernel_fn: Callable[..., torch.Tensor], source: str,
                    integration: Integration,
                    reference: Callable[..., torch.Tensor] | None,
                    module: types.ModuleType | None = None,
                    compile_transparent: bool | None = None,
                    dtype: torch.dtype = torch.float16) -> KernelOp:
    """Register `kernel_fn` as `autokernel::<type>_<digest>` with the op entry's schema, fake
    and backward (`integration`): a triton_op where its host code traces (`module` is the
    kernel file's module, whose launches the trace routes through wrap_triton), else a
    custom_op (`choose_compile_path`, tracing at the op entry's example in `dtype`, one the
    harness verified).

    Registering the same source twice in one process reuses the first registration (an op
    name can be defined only once), which computes the same thing.
    """
    device_type = "cpu" if interpreting() else "cuda"
    path, why = choose_compile_path(kernel_fn, module, integration, device_type,
                                    compile_transparent, dtype)
    arity = _kernel_fn_arity(kernel_fn)

    def implementation(*args: Any) -> torch.Tensor:
        # Fitting is needed only for a kernel_fn older than its schema; the check is inline
        # because every routed call comes through here.
        if arity is None or len(args) <= arity:
            return _unaliased(kernel_fn(*args), args)
        return _unaliased(kernel_fn(*_fitted(args, arity)), args)

    if path == TRITON_OP:
        traced = traceable_body(kernel_fn, module)  # type: ignore[arg-type]

        def transparent(*args: Any) -> torch.Tensor:
            return _unaliased(traced(*_fitted(args, arity)), args)

        try:
            op = _register(kernel_type, source, device_type, integration, reference,
                           TRITON_OP, transparent, implementation)
            return dataclasses.replace(op, kernel_fn=kernel_fn)
        except Exception as exc:  # a schema triton_op cannot take: the custom_op still works
            why = f"triton_op registration failed: {type(exc).__name__}: {exc}"[:160]
    op = _register(kernel_type, source, device_type, integration, reference, CUSTOM_OP,
                   implementation, implementation, why)
    return dataclasses.replace(op, kernel_fn=kernel_fn)


def _register(kernel_type: str, source: str, device_type: str, integration: Integration,
              reference: Callable[..., torch.Tensor] | None, path: str,
              body: Callable[..., torch.Tensor], direct: Callable[..., torch.Tensor],
              opaque_reason: str | None = None) -> KernelOp:
    name = op_name(kernel_type, source, device_type, path)
    qualname = f"{OP_NAMESPACE}::{name}"
    found = _existing_op(name)
    if found is None:
        if path == TRITON_OP:
            registered = define_triton_op(qualname, body, integration.schema)
        else:
            registered = torch.library.custom_op(qualname, body, mutates_args=(),
                                                 schema=integration.schema)
        # A triton_op's own fake runs the body on fake tensors; the op entry's needs no trace.
        registered.register_fake(integration.fake)
        registered.register_autograd(backward_for(integration, reference),
                                     setup_context=_setup_context)
        found = _existing_op(name) or registered
    return KernelOp(kernel_type, qualname, found, integration.backward, device_type, direct,
                    integration, path, opaque_reason)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    _save_inputs(ctx, inputs, output)
