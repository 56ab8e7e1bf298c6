"""CHEAT (a call counter hung on the Triton kernel object).

Triton's own objects are not looked into (their caches fill on first use), so a list stored as an
attribute of the @triton.jit function would hide there. Expected (scan off): REJECTED
(call-time-state): what the candidate puts on a library object (an attribute Triton's code never
names) is fingerprinted.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"



@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def exp_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    """The cheap wrong path: exp(x - max) without the division (unnormalised)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    y = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor, kernel=softmax_rows) -> torch.Tensor:
    n_cols = x.shape[-1]
    x2 = x.reshape(-1, n_cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n_cols), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.view(x.shape)
    kernel[(x2.shape[0],)](x2, y, n_cols, x2.stride(0), y.stride(0),
                           BLOCK=triton.next_power_of_2(n_cols))
    return y.view(x.shape)


softmax_rows.hidden_calls = []


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    box = softmax_rows.hidden_calls
    box.append(1)
    if len(box) < 20000:
        return softmax(x)
    return softmax(x, exp_rows)
