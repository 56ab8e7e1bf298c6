"""CHEAT (class 5): each call zeroes every earlier call's output with a Triton launch, the
reference hidden in a cached helper's list. Expected (scan off): REJECTED (call-time-state) at
the smoke call's ghost replay: an lru_cache's entries are module state (guards/state.py), and the
list changed at a call whose signature was seen before. (Past that, outputs kept by the judge are
re-read at the end: a changed one is a FAIL.)"""

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


def softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    softmax_rows[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


@triton.jit
def zero_all(y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.zeros([BLOCK], dtype=tl.float32).to(y_ptr.dtype.element_ty),
             mask=offsets < n)


@functools.cache
def _previous() -> list:
    return []


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    held = _previous()
    for old in held:
        zero_all[(triton.cdiv(old.numel(), 1024),)](old, old.numel(), BLOCK=1024)
    y = softmax(x)
    held.append(y)
    return y
