"""A kernel's outputs, one tensor or a tuple of them (`OpSpec.outputs`), as the harness checks them.

A kernel type with one output returns a tensor, and every helper here treats it exactly as the
harness always has. A type with several (add_rmsnorm's (y, h)) returns a tuple of exactly that
many, and each output gets every check a single one gets: a plain `torch.Tensor` (no subclass),
its shape, dtype and device, its values within tolerance (poison left unwritten, NaN/Inf where
the reference is finite), bitwise determinism, a buffer no earlier call handed out and no later
call overwrites, and the timed-output audit. On top of that no output may share memory with an
input or with another output: a kernel could otherwise hand back its input as h, or one buffer
as both outputs.
"""

from __future__ import annotations

from typing import Any

import torch

from autokernel.harness.compare import Mismatch, bitwise_equal, check_output
from autokernel.harness.guards import Poison
from autokernel.ops.spec import Tolerance


def as_outputs(value: Any) -> tuple[Any, ...]:
    """A tuple of outputs: the items of a tuple or list, else the value alone."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def returned_type(out: Any) -> str:
    return f"{type(out).__module__}.{type(out).__qualname__}"


def tuple_problem(out: Any, count: int) -> tuple[str, bool] | None:
    """For a type with `count` > 1 outputs: None when `out` is a tuple (or list) of `count` plain
    tensors, else (what it is instead, whether a tensor subclass is the reason)."""
    if not isinstance(out, (tuple, list)):
        return returned_type(out), _subclass(out)
    if len(out) != count:
        return f"a {type(out).__name__} of {len(out)} items", False
    for position, item in enumerate(out):
        if type(item) is not torch.Tensor:  # noqa: E721 - subclasses (lazy outputs) must not pass
            return f"output {position + 1} of {count}: {returned_type(item)}", _subclass(item)
    return None


def _subclass(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and type(value) is not torch.Tensor  # noqa: E721


def aliasing(outputs: tuple[torch.Tensor, ...], inputs: list[torch.Tensor]) -> str | None:
    """Why some output shares memory with an input or another output, or None."""
    def storage(t: torch.Tensor) -> int:
        return t.untyped_storage().data_ptr()

    taken = {storage(t): f"input #{i}" for i, t in enumerate(inputs) if t.numel()}
    for position, out in enumerate(outputs):
        if not out.numel():
            continue
        owner = taken.get(storage(out))
        if owner is not None:
            return f"output {position + 1} of {len(outputs)} shares memory with {owner}"
        taken[storage(out)] = f"output {position + 1}"
    return None


def outputs_bitwise_equal(a: Any, b: Any) -> bool:
    first, second = as_outputs(a), as_outputs(b)
    return len(first) == len(second) and all(bitwise_equal(x, y) for x, y in zip(first, second))


def clone_outputs(out: Any) -> Any:
    return tuple(t.clone() for t in out) if isinstance(out, tuple) else out.clone()


def zero_filled(out: Any) -> bool:
    """Every output a tensor of zeros only: what a buffer zero-filled on the host still holds
    when the launches that would have accumulated into it are skipped (the ghost replay)."""
    return all(type(t) is torch.Tensor and t.numel() > 0  # noqa: E721 - as check_output
               and not bool(t.ne(0).any()) for t in as_outputs(out))


def ghost_proves_nothing(out: Any, ref: Any) -> bool:
    """Whether a ghost replay's output says nothing: zero-filled (`zero_filled`), or a reference
    without one finite value (a norm's row of NaN and inf inputs), which unwritten memory that
    reads as NaN matches position by position."""
    return zero_filled(out) or not any(bool(torch.isfinite(r).any()) for r in as_outputs(ref))


def check_outputs(out: Any, ref: Any, shapes: Any, dtypes: Any, count: int,
                  device: torch.device, tolerance: Tolerance,
                  exhaustive: bool = True, poison: Poison | None = None,
                  cancelling: bool = False) -> Mismatch | None:
    """`check_output` on one output, or on each of `count` (ref, shapes, dtypes: one per
    output), the first wrong one named."""
    if count == 1:
        return check_output(out, ref, shapes, dtypes, device, tolerance, exhaustive, poison,
                            cancelling)
    for position, (one, one_ref, shape, dtype) in enumerate(zip(out, ref, shapes, dtypes)):
        mismatch = check_output(one, one_ref, shape, dtype, device, tolerance, exhaustive,
                                poison, cancelling)
        if mismatch is not None:
            return Mismatch(mismatch.kind, f"output {position + 1} of {count}: "
                            f"{mismatch.detail}", mismatch.max_abs_error, mismatch.worst_index,
                            mismatch.bad_elements)
    return None
