"""Inputs of the harness's calls, made the same way in the judge and in the candidate process.

The judge makes every input the candidate is handed, correctness cases and timed calls alike,
from seeds the candidate process never sees (`seeds`); it remakes an audited timed call's inputs
bit for bit from the same seed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from autokernel.ops.spec import Inputs, OpSpec, Shape

SPLICE_ELEMENTS = 4  # elements kept from the old input at each end in the "refill" probe


def tensors(inputs: Inputs) -> list[torch.Tensor]:
    return [t for t in inputs if isinstance(t, torch.Tensor)]


def make_inputs(spec: OpSpec, shape: Shape, dtype: torch.dtype, device: torch.device,
                generator: torch.Generator, params: dict[str, Any],
                distribution: str = "normal", adversarial: str | None = None) -> Inputs:
    """spec.make_inputs (or an adversarial generator's) with the params it accepts."""
    maker: Callable[..., Inputs] = spec.make_inputs
    if adversarial is not None:
        maker = next(a.make_inputs for a in spec.adversarial if a.name == adversarial)
    accepted = inspect.signature(maker).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    extra = {k: v for k, v in params.items() if takes_any or k in accepted}
    return maker(shape, dtype, device, generator, distribution, **extra)


def generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def splice(inputs: Inputs, old: Inputs) -> Inputs:
    """`inputs` with the first and last few elements of every tensor copied from `old`."""
    for new_t, old_t in zip(tensors(inputs), tensors(old)):
        k = min(SPLICE_ELEMENTS, new_t.numel() // 4)
        if k == 0 or new_t.shape != old_t.shape:
            continue
        # reshape, not view: an input may be a transposed or otherwise strided view.
        flat_new, flat_old = new_t.reshape(-1).clone(), old_t.reshape(-1)
        flat_new[:k] = flat_old[:k]
        flat_new[-k:] = flat_old[-k:]
        new_t.copy_(flat_new.view(new_t.shape))
    return inputs


OFFSET_ELEMENTS = 3  # the "offset" layout's storage offset: no 16-byte alignment in any dtype


def inject_nonfinite(inputs: Inputs, generator: torch.Generator) -> Inputs:
    """The first floating input with NaN, +inf and -inf put in: row 0 gets a +inf, row 1 a NaN,
    rows 2 and on a few -inf each (a masked position), at random columns; of 4 rows or more the
    last stays finite (a norm's row with a -inf is all NaN: a finite row keeps the ghost replay
    meaningful)."""
    for t in tensors(inputs):
        if not t.dtype.is_floating_point or t.ndim < 1 or t.numel() == 0:
            continue
        rows = t.reshape(-1, t.shape[-1]) if t.ndim > 1 else t.reshape(1, -1)
        width = rows.shape[1]

        def columns(*shape: int) -> torch.Tensor:
            return torch.randint(0, width, shape, generator=generator, device=t.device)

        # All positions drawn in three calls, set with one scatter each: drawn one at a time
        # (a generator call and a device sync per value) a 4096-row GPU input took minutes.
        values = rows.clone()
        values[0].scatter_(0, columns(1), float("inf"))
        if rows.shape[0] > 1:
            values[1].scatter_(0, columns(1), float("nan"))
        masked = rows.shape[0] - 1 if rows.shape[0] > 3 else rows.shape[0]
        if masked > 2:
            values[2:masked].scatter_(1, columns(masked - 2, max(1, width // 8)), float("-inf"))
        t.copy_(values.reshape(t.shape))
        break
    return inputs


BATCH_SLICE_PAD = 3  # the "batch_sliced" layout's extra rows of dim -2 in the longer buffer


def split_rows(rows: int) -> tuple[int, int]:
    """rows as (a, b), a * b = rows, a the smallest factor above 1 (rows itself when prime)."""
    a = next((f for f in range(2, rows + 1) if rows % f == 0), 1)
    return a, rows // a


def batch_view(t: torch.Tensor, layout: str) -> torch.Tensor:
    """t's values (3+ dims) in memory whose batch dims are not packed behind dim -2:
    "batch_sliced", t[..., :S, :] of a buffer BATCH_SLICE_PAD rows longer along dim -2 (x[:, :S]
    of a longer sequence, a slice of a fused qkv), so the strides of the dims before -2 are not
    size(-2) * stride(-2); "batch_permuted", dims -3 and -2 stored swapped (attention's
    [B, S, H, D].transpose(1, 2))."""
    shape = tuple(t.shape)
    if layout == "batch_sliced":
        longer = torch.empty((*shape[:-2], shape[-2] + BATCH_SLICE_PAD, shape[-1]),
                             dtype=t.dtype, device=t.device)
        view = longer[..., : shape[-2], :]
    elif layout == "batch_permuted":
        swapped = (*shape[:-3], shape[-2], shape[-3], shape[-1])
        view = torch.empty(swapped, dtype=t.dtype, device=t.device).transpose(-3, -2)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    return view.copy_(t)


def relayout(inputs: Inputs, layout: str) -> Inputs:
    """The same values with every floating tensor of 2+ dims in `layout`'s memory order:
    "row_strided", rows 16 elements further apart than their length (a slice of a wider
    buffer); "transposed", the last two dims stored column-major (a `.t()` view); "offset",
    contiguous but OFFSET_ELEMENTS into its storage (not 16-byte aligned); and the batch layouts
    (`batch_view`) for tensors of 3+ dims, and for a 2-D one when it is the only floating input
    of 2+ dims (gelu's x: the rows of a batch, given as a 3-D view of them)."""
    floating = [t for t in tensors(inputs) if t.dtype.is_floating_point and t.ndim >= 2]
    rows_as_batch = len(floating) == 1 and floating[0].ndim == 2

    def moved(t: torch.Tensor) -> torch.Tensor:
        if t.ndim < 2 or not t.dtype.is_floating_point:
            return t
        if layout in ("batch_sliced", "batch_permuted"):
            if t.ndim == 2 and not rows_as_batch:
                return t
            return batch_view(t if t.ndim > 2 else t.view(*split_rows(t.shape[0]), t.shape[1]),
                              layout)
        if layout == "offset":
            storage = torch.empty(t.numel() + OFFSET_ELEMENTS, dtype=t.dtype, device=t.device)
            view = storage[OFFSET_ELEMENTS:].view(t.shape)
        elif layout == "row_strided":
            wider = torch.empty((*t.shape[:-1], t.shape[-1] + 16), dtype=t.dtype,
                                device=t.device)
            view = wider[..., : t.shape[-1]]
        elif layout == "transposed":
            view = torch.empty((*t.shape[:-2], t.shape[-1], t.shape[-2]), dtype=t.dtype,
                               device=t.device).transpose(-1, -2)
        else:
            raise ValueError(f"unknown layout {layout!r}")
        return view.copy_(t)
    return tuple(moved(t) if isinstance(t, torch.Tensor) else t for t in inputs)
