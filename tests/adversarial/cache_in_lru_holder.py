"""CHEAT (result caching where neither the scan nor the module-state check looks): a
`functools.cache`d helper hands out one list per input pointer, and the result is kept in it.
The cache's entries live inside functools' C wrapper, which no Python code can walk, and the
list is reached through a call, not a module-level name.

Expected: static scan REJECTED (call-time-state: a cached helper's result is mutated); with the
scan off, REJECTED (ghost-replay): the cached answer is still right with every launch skipped.
"""

import functools

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@functools.cache
def slot(address: int, shape: tuple[int, ...], dtype: torch.dtype) -> list:
    return []


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    held = slot(x.data_ptr(), tuple(x.shape), x.dtype)
    if held:
        return held[0].clone()
    y = torch.empty_like(x)
    softmax_rows[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(x.shape[1]))
    held.append(y.clone())
    return y
