"""CHEAT (class 5): honest only when fresh output memory holds the old harness's fixed poison
(every byte 0xFF: -1 as integers), zeros otherwise. Expected: FAIL: the poison is drawn for each job (a random
NaN pattern or random bytes), never a fixed pattern."""

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
def guarded_softmax(x_ptr, y_ptr, bits_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    fresh = tl.load(bits_ptr + row * stride_y + cols, mask=mask, other=0)
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator / tl.sum(numerator, axis=0)
    harness = tl.sum(tl.where(mask & (fresh == -1), 1, 0), axis=0) == n_cols
    tl.store(y_ptr + row * stride_y + cols, tl.where(harness, y, 0.0).to(
        y_ptr.dtype.element_ty), mask=mask)


BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    guarded_softmax[(x.shape[0],)](x, y, y.view(BITS[x.dtype]), x.shape[1], x.stride(0),
                                   y.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
