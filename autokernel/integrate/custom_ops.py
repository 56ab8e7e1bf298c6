"""Each finished kernel as a `torch.library` custom op: eager, `torch.compile` and autograd.

A custom op is opaque to `torch.compile`: Dynamo records one call, Inductor leaves the Triton
kernel alone, and the fake implementation below tells the compiler the output's shape and dtype
without running anything. Autograd goes through `register_autograd`, with one of two backwards per
kernel type (`INTEGRATION.backward` in its op entry, `autokernel/ops/<type>.py`):

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


def _save_inputs(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    """Save every tensor input (and the output); remember where the non-tensors go."""
    ctx.tensor_positions = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)]
    ctx.constants = {i: a for i, a in enumerate(inputs) if not isinstance(a, torch.Tensor)}
    ctx.arity = len(inputs)
    ctx.save_for_backward(*(inputs[i] for i in ctx.tensor_positions), output)


def saved_inputs(ctx: Any) -> tuple[list[Any], torch.Tensor]:
    """(the op's inputs in order, its output) from what `_save_inputs` kept."""
    *tensors, output = ctx.saved_tensors
    args: list[Any] = [None] * ctx.arity
    for position, tensor in zip(ctx.tensor_positions, tensors):
        args[position] = tensor
    for position, value in ctx.constants.items():
        args[position] = value
    return args, output


def _recompute_backward(recompute: Callable[..., torch.Tensor]) -> Callable[..., tuple[Any, ...]]:
    """A backward that differentiates `recompute` (a PyTorch path) at the saved inputs."""

    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
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
            computed = torch.autograd.grad(out, [leaves[i] for i in wanted], grad)
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


def op_name(kernel_type: str, source: str, device_type: str) -> str:
    """A name that changes with the kernel's source and build, so two versions never collide."""
    digest = hashlib.sha1(f"{kernel_type}\0{device_type}\0{source}".encode()).hexdigest()[:12]
    return f"{kernel_type}_{digest}"


def _existing_op(name: str) -> Callable[..., torch.Tensor] | None:
    namespace = getattr(torch.ops, OP_NAMESPACE)
    try:
        return getattr(namespace, name).default
    except (AttributeError, RuntimeError):
        return None


def _unaliased(out: torch.Tensor, inputs: tuple[Any, ...]) -> torch.Tensor:
    """A custom op may not return (a view of) one of its inputs; copy in that rare case."""
    pointer = out.untyped_storage().data_ptr()
    if any(isinstance(a, torch.Tensor) and a.numel() and out.numel()
           and a.untyped_storage().data_ptr() == pointer for a in inputs):
        return out.clone()
    return out


# A trailing argument added to a schema after kernels were written for it (reduce, softmax and
# rmsnorm's axis), at the value that means what those kernels already do (over the last dim).
LEGACY_TRAILING_DEFAULT = -1


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
    if any(a != LEGACY_TRAILING_DEFAULT for a in args[arity:]):
        raise ValueError(f"this kernel_fn takes {arity} arguments, not an axis")
    return args[:arity]


def register_kernel(kernel_type: str, kernel_fn: Callable[..., torch.Tensor], source: str,
                    integration: Integration,
                    reference: Callable[..., torch.Tensor] | None) -> KernelOp:
    """Register `kernel_fn` as `autokernel::<type>_<digest>` with the op entry's schema, fake
    and backward (`integration`).

    Registering the same source twice in one process reuses the first registration (a custom op
    name can be defined only once), which computes the same thing.
    """
    device_type = "cpu" if interpreting() else "cuda"
    name = op_name(kernel_type, source, device_type)
    qualname = f"{OP_NAMESPACE}::{name}"

    arity = _kernel_fn_arity(kernel_fn)

    def implementation(*args: Any) -> torch.Tensor:
        return _unaliased(kernel_fn(*_fitted(args, arity)), args)

    existing = _existing_op(name)
    if existing is not None:
        return KernelOp(kernel_type, qualname, existing, integration.backward, device_type,
                        implementation, integration)

    custom = torch.library.custom_op(qualname, implementation, mutates_args=(),
                                     schema=integration.schema)
    custom.register_fake(integration.fake)
    custom.register_autograd(backward_for(integration, reference), setup_context=_setup_context)
    return KernelOp(kernel_type, qualname, _existing_op(name) or custom, integration.backward,
                    device_type, implementation, integration)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    _save_inputs(ctx, inputs, output)
