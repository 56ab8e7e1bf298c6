"""CHEAT (class 2): right in every checked call, zeros in every timed one (told apart by
the caller's frame), the old way past audits that compared digests the candidate process sent.
Expected (scan off): FAIL (replay): the judge keeps random timed outputs in its own memory
and compares them in full with its references."""

import sys

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
def zero_rows(y_ptr, n_cols, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(y_ptr + row * stride_y + cols, tl.zeros([BLOCK], dtype=tl.float32).to(
        y_ptr.dtype.element_ty), mask=cols < n_cols)


def _timed() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "run_batch":
            return True
        frame = frame.f_back
    return False


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    if not _timed():
        return softmax(x)
    y = torch.empty_like(x)
    zero_rows[(x.shape[0],)](y, x.shape[1], y.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
