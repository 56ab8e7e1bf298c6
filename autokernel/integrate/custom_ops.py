"""Each finished kernel as a `torch.library` custom op: eager, `torch.compile` and autograd.

A custom op is opaque to `torch.compile`: Dynamo records one call, Inductor leaves the Triton
kernel alone, and the fake implementation below tells the compiler the output's shape and dtype
without running anything. Autograd goes through `register_autograd`, with one of two backwards per
kernel type (`BACKWARD_KIND`):

- "analytic": a closed-form gradient written with PyTorch ops (matmul, softmax, cross_entropy,
  rotary_embedding, reduce). Cheap, and exact up to rounding;
- "recompute": backward re-runs the op's PyTorch reference from the saved inputs under autograd
  and differentiates that (rmsnorm, layernorm, fused_mlp with the reference oracles;
  flash_attention with F.scaled_dot_product_attention, whose backward never materializes the S×S
  score matrix the reference builds). It costs one extra reference forward per backward, and
  gives the gradient of the reference, which the kernel matches within the harness's tolerance.

The forward is always the optimized kernel; no backward uses a Triton kernel of ours.

This file imports only torch (and the kernel files it is handed), because `autokernel export`
inlines it into a self-contained module.
"""

from __future__ import annotations

import hashlib
import linecache
import os
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

OP_NAMESPACE = "autokernel"

# The schema of each kernel type's op: the reference's positional signature (autokernel.reference).
SCHEMAS: dict[str, str] = {
    "matmul": "(Tensor a, Tensor b) -> Tensor",  # batched like torch.matmul
    "flash_attention": "(Tensor q, Tensor k, Tensor v, bool causal, float? scale) -> Tensor",
    "fused_mlp": "(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down) -> Tensor",
    "softmax": "(Tensor x) -> Tensor",
    "layernorm": "(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor",
    "rmsnorm": "(Tensor x, Tensor weight, float eps) -> Tensor",
    "cross_entropy": "(Tensor logits, Tensor targets) -> Tensor",
    "rotary_embedding": "(Tensor x, Tensor cos, Tensor sin) -> Tensor",
    "reduce": "(Tensor x) -> Tensor",
}

BACKWARD_KIND: dict[str, str] = {
    "matmul": "analytic",
    "flash_attention": "recompute",
    "fused_mlp": "recompute",
    "softmax": "analytic",
    "layernorm": "recompute",
    "rmsnorm": "recompute",
    "cross_entropy": "analytic",
    "rotary_embedding": "analytic",
    "reduce": "analytic",
}

BACKWARD_DESCRIPTION: dict[str, str] = {
    "analytic": "analytic backward (closed-form gradient in PyTorch ops)",
    "recompute": "backward recomputes the PyTorch reference under autograd",
}

IGNORE_INDEX = -100  # F.cross_entropy's default, which the cross_entropy kernel implements


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
# Fake (meta) implementations: output shape and dtype only


def _fake_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.matmul's output for operands of two or more dims: the batch dims broadcast."""
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return a.new_empty((*batch, a.shape[-2], b.shape[-1]))


def _fake_like_first(x: torch.Tensor, *rest: Any) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fake_fused_mlp(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                    w_down: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], w_down.shape[0]))


def _loss_dtype(logits: torch.Tensor) -> torch.dtype:
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def _fake_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return logits.new_empty((), dtype=_loss_dtype(logits))


def _fake_reduce(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[:-1])


FAKES: dict[str, Callable[..., torch.Tensor]] = {
    "matmul": _fake_matmul,
    "flash_attention": _fake_like_first,
    "fused_mlp": _fake_fused_mlp,
    "softmax": _fake_like_first,
    "layernorm": _fake_like_first,
    "rmsnorm": _fake_like_first,
    "cross_entropy": _fake_cross_entropy,
    "rotary_embedding": _fake_like_first,
    "reduce": _fake_reduce,
}


# ---------------------------------------------------------------------------------------------
# Backwards


def _save_inputs(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    """Save every tensor input (and the output); remember where the non-tensors go."""
    ctx.tensor_positions = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)]
    ctx.constants = {i: a for i, a in enumerate(inputs) if not isinstance(a, torch.Tensor)}
    ctx.arity = len(inputs)
    ctx.save_for_backward(*(inputs[i] for i in ctx.tensor_positions), output)


def _saved(ctx: Any) -> tuple[list[Any], torch.Tensor]:
    """(the op's inputs in order, its output) from what `_save_inputs` kept."""
    *tensors, output = ctx.saved_tensors
    args: list[Any] = [None] * ctx.arity
    for position, tensor in zip(ctx.tensor_positions, tensors):
        args[position] = tensor
    for position, value in ctx.constants.items():
        args[position] = value
    return args, output


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate_half_transposed(x: torch.Tensor) -> torch.Tensor:
    """The adjoint of rotate_half: <rotate_half(a), b> = <a, this(b)>."""
    half = x.shape[-1] // 2
    return torch.cat((x[..., half:], -x[..., :half]), dim=-1)


def _backward_matmul(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    """dA = dC @ Bᵀ, dB = Aᵀ @ dC, each summed back over the batch dims it was broadcast to."""
    (a, b), _ = _saved(ctx)
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = (grad @ b.transpose(-1, -2)).sum_to_size(a.shape)
    if ctx.needs_input_grad[1]:
        grad_b = (a.transpose(-1, -2) @ grad).sum_to_size(b.shape)
    return grad_a, grad_b


def _backward_softmax(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    (x,), y = _saved(ctx)
    y32, g32 = y.float(), grad.float()
    grad_x = y32 * (g32 - (g32 * y32).sum(dim=-1, keepdim=True))
    return (grad_x.to(x.dtype),)


def _backward_cross_entropy(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    (logits, targets), _ = _saved(ctx)
    if not ctx.needs_input_grad[0]:
        return None, None
    probs = torch.softmax(logits.to(_loss_dtype(logits)), dim=-1)
    valid = targets != IGNORE_INDEX
    rows = torch.arange(targets.shape[0], device=targets.device)
    probs[rows[valid], targets[valid]] -= 1.0
    probs[~valid] = 0.0
    # The mean runs over the rows that are not ignored (0/0 = nan when all are, as in PyTorch).
    scale = grad.to(probs.dtype) / valid.sum().to(probs.dtype)
    return (probs * scale).to(logits.dtype), None


def _backward_rotary(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    (x, cos, sin), _ = _saved(ctx)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    g, xc = grad.to(compute), x.to(compute)
    grad_x = grad_cos = grad_sin = None
    if ctx.needs_input_grad[0]:
        grad_x = (g * cos.to(compute) + _rotate_half_transposed(g * sin.to(compute))).to(x.dtype)
    if ctx.needs_input_grad[1]:  # cos and sin broadcast over batch and heads
        grad_cos = (g * xc).sum_to_size(cos.shape).to(cos.dtype)
    if ctx.needs_input_grad[2]:
        grad_sin = (g * _rotate_half(xc)).sum_to_size(sin.shape).to(sin.dtype)
    return grad_x, grad_cos, grad_sin


def _backward_reduce(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    (x,), _ = _saved(ctx)
    return (grad.unsqueeze(-1).expand(x.shape).to(x.dtype),)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
          scale: float | None = None) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def _recompute_backward(recompute: Callable[..., torch.Tensor]) -> Callable[..., tuple[Any, ...]]:
    """A backward that differentiates `recompute` (a PyTorch path) at the saved inputs."""

    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        args, _ = _saved(ctx)
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


ANALYTIC_BACKWARDS: dict[str, Callable[..., tuple[Any, ...]]] = {
    "matmul": _backward_matmul,
    "softmax": _backward_softmax,
    "cross_entropy": _backward_cross_entropy,
    "rotary_embedding": _backward_rotary,
    "reduce": _backward_reduce,
}


def backward_for(kernel_type: str,
                 references: Mapping[str, Callable[..., torch.Tensor]]) -> Callable[..., Any]:
    if BACKWARD_KIND[kernel_type] == "analytic":
        return ANALYTIC_BACKWARDS[kernel_type]
    if kernel_type == "flash_attention":
        return _recompute_backward(_sdpa)
    return _recompute_backward(references[kernel_type])


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


def register_kernel(kernel_type: str, kernel_fn: Callable[..., torch.Tensor], source: str,
                    references: Mapping[str, Callable[..., torch.Tensor]]) -> KernelOp:
    """Register `kernel_fn` as `autokernel::<type>_<digest>` with its fake and its backward.

    Registering the same source twice in one process reuses the first registration (a custom op
    name can be defined only once), which computes the same thing.
    """
    if kernel_type not in SCHEMAS:
        raise KeyError(f"unknown kernel type {kernel_type!r}")
    device_type = "cpu" if interpreting() else "cuda"
    name = op_name(kernel_type, source, device_type)
    qualname = f"{OP_NAMESPACE}::{name}"

    def implementation(*args: Any) -> torch.Tensor:
        return _unaliased(kernel_fn(*args), args)

    existing = _existing_op(name)
    if existing is not None:
        return KernelOp(kernel_type, qualname, existing, BACKWARD_KIND[kernel_type], device_type,
                        implementation)

    custom = torch.library.custom_op(qualname, implementation, mutates_args=(),
                                     schema=SCHEMAS[kernel_type])
    custom.register_fake(FAKES[kernel_type])
    custom.register_autograd(backward_for(kernel_type, references), setup_context=_setup_context)
    return KernelOp(kernel_type, qualname, _existing_op(name) or custom,
                    BACKWARD_KIND[kernel_type], device_type, implementation)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    _save_inputs(ctx, inputs, output)
