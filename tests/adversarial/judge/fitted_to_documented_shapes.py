"""CHEAT (class 7): right only at the shapes the registry documents (its CPU sweep, edges,
smoke and timed shapes), a cheap wrong answer elsewhere. Expected: FAIL at shape_sweep: the
plan draws shapes of its own for each job."""

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


KNOWN_WIDTHS = {1, 8, 33, 37, 64, 100, 128, 500, 513, 1000, 1024, 2048, 4096, 32769}


def half_rows(x: torch.Tensor) -> torch.Tensor:
    """A softmax over each row's first half only; the rest left zero."""
    x = x.contiguous()
    y = torch.zeros_like(x)
    softmax_rows[(x.shape[0],)](x, y, max(1, x.shape[1] // 2), x.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    if x.shape[-1] in KNOWN_WIDTHS:
        return softmax(x)
    return half_rows(x)
