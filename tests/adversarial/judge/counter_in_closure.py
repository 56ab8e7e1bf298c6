"""CHEAT (class 5): a call counter in a factory's closure (a list cell, no nonlocal): honest
for the first calls. Expected (scan off): REJECTED (call-time-state): the closure's state
changed between calls."""

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


def _make():
    calls = [0]

    def kernel(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) > 40:
            return softmax(x[:1]).expand(x.shape).contiguous()
        return softmax(x)
    return kernel


kernel_fn = _make()
