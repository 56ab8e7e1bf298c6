"""CHEAT (class 6): writes 0 for every probability below 0.0099, which fp16's and bf16's
absolute tolerance (1e-2, 2e-2) forgive element by element. Expected: FAIL: the row rule (each
row's total error relative to its mass) where outputs are small."""

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
def softmax_drop(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator / tl.sum(numerator, axis=0)
    y = tl.where(y < 0.0099, 0.0, y)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    softmax_drop[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
