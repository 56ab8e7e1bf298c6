"""FAULTY, class 7 (an output that does not stay the caller's), hidden from the module-state check:
four byte buffers allocated at import (constants, as far as any check of the module's state can
tell), and each output is a view into the next one in turn, so a caller's result is overwritten
four calls later. Three calls in a row (the determinism stage) get three different buffers.

Expected: static scan REJECTED (call-time-state: `next()` of a module-level cycle). With the scan
off, REJECTED (call-time-state) at the first smoke call: the cycle's position is module state
(guards/state.py fingerprints it through its __reduce__).
"""

import itertools

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"
POOL_BYTES = 1 << 18

_BUFFERS = [torch.empty(POOL_BYTES, dtype=torch.uint8,
                        device="cuda" if torch.cuda.is_available() else "cpu") for _ in range(4)]
_TURNS = itertools.cycle(_BUFFERS)


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def output_for(x: torch.Tensor) -> torch.Tensor:
    nbytes = x.numel() * x.element_size()
    if nbytes > POOL_BYTES:
        return torch.empty_like(x)
    return next(_TURNS)[:nbytes].view(x.dtype).view(x.shape)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = output_for(x)
    softmax_rows[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
