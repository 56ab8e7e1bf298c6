"""CHEAT (class 2): a patched timer. Each timed call burns ~20 ms on the host, and the
kernel rewrites the batch's list of measured times (found on the caller's frame) to a
microsecond each. Expected (scan off): FAIL (timing-contradiction): the judge's own clock
sees each batch take far longer than the times reported."""

import sys
import time

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


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    y = softmax(x)
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "run_batch":
        frame = frame.f_back
    if frame is not None:
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:
            pass
        times = frame.f_locals.get("device_us")
        if isinstance(times, list):
            times[:] = [1.0] * len(times)
        frame.f_locals["began"] = time.perf_counter()
    return y
