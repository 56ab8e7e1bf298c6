"""The autograd context of a correctness call, applied in the candidate process.

The judge draws one of `cases.GRAD_CONTEXTS` for each case from its secret (`cases`) and names it
with the case's inputs; the candidate process makes the inputs and the call fit it. Each is a
context production calls kernel_fn in:

- "plain": grad mode on, inputs that do not require grad (an eval forward without no_grad);
- "no_grad": under `torch.no_grad()`;
- "inference_mode": under `torch.inference_mode()`, on inference tensors (serving: vLLM, HF
  generate);
- "requires_grad": grad mode on, inputs that require grad and carry a grad_fn (activations of a
  training forward, a direct call);
- "autograd_forward": the same inputs with grad mode off (the integration's custom op calls
  kernel_fn inside an autograd.Function's forward).
- "autocast": grad mode on under `torch.autocast` (mixed-precision training: the flag stays on
  inside a custom op that has no autocast rule of its own).

The tensors of every context share the memory the judge handed over (its values, its layout),
so the refill probe's new values reach them; the output is compared detached.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from autokernel.ops.spec import Inputs

CONTEXTS: tuple[str, ...] = ("plain", "no_grad", "inference_mode", "requires_grad",
                             "autograd_forward", "autocast")
# The autocast dtype on each device type (AMP's defaults).
AUTOCAST_DTYPES = {"cpu": torch.bfloat16, "cuda": torch.float16}
NEEDS_GRAD = frozenset({"requires_grad", "autograd_forward"})


def inputs_in_context(inputs: Inputs, context: str) -> Inputs:
    """`inputs` as the context has them: over the same memory, inference tensors or (floating
    ones) non-leaf tensors that require grad."""
    if context not in CONTEXTS:
        raise ValueError(f"unknown autograd context {context!r}")
    if context == "inference_mode":
        return tuple(_inference_alias(t) if isinstance(t, torch.Tensor) else t for t in inputs)
    if context in NEEDS_GRAD:
        return tuple(_requiring_grad(t) if isinstance(t, torch.Tensor) else t for t in inputs)
    return inputs


def _inference_alias(t: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        alias = torch.empty(0, dtype=t.dtype, device=t.device)
        return alias.set_(t.untyped_storage(), t.storage_offset(), t.size(), t.stride())


# Same-size integer views, to put an input's exact bits back after the multiply below.
_BIT_VIEWS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _requiring_grad(t: torch.Tensor) -> torch.Tensor:
    if not (t.dtype.is_floating_point or t.dtype.is_complex):
        return t  # integer tensors (targets, indices) cannot require grad
    # A non-leaf with a grad_fn, as an activation is (not a view of a leaf, which a kernel could
    # single out): t's memory multiplied in place by a one that requires grad. x * 1 keeps every
    # finite value, but not every NaN's bits: a GPU's multiply returns its canonical NaN, and a
    # signalling NaN comes back quiet. The judge checks the inputs bit for bit after the call
    # (input mutation), so the original bits are put back under the grad_fn.
    bits = _BIT_VIEWS.get(t.element_size())
    saved = t.detach().view(bits).clone() if bits is not None else None
    with torch.enable_grad():
        x = t.detach()
        x.mul_(torch.ones((), dtype=t.dtype, device=t.device, requires_grad=True))
    if saved is not None:
        with torch.no_grad():
            x.detach().view(bits).copy_(saved)
    return x


@contextlib.contextmanager
def in_context(context: str, device_type: str = "cpu") -> Iterator[Any]:
    """The grad mode (and autocast) the context calls kernel_fn under."""
    if context == "autocast":
        with torch.enable_grad(), torch.autocast(device_type, AUTOCAST_DTYPES[device_type]):
            yield
    elif context == "inference_mode":
        with torch.inference_mode():
            yield
    elif context in ("no_grad", "autograd_forward"):
        with torch.no_grad():
            yield
    else:
        with torch.enable_grad():
            yield
