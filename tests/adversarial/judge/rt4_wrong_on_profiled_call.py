"""CHEAT (red team 4: wrong on a call made while timing whose output nobody compared).

Correct on every call but the fourth the process makes. With the correctness stages cut to the
smoke case (smoke call, its ghost replay), the timing's warm-up is call 3 and call 4 is the
profiled call (the launch digest, on the held warm-up inputs), whose output the judge never
looked at. Every call's output is compared now: this one too (a FAIL at the profiled call).
"""

import operator

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"
WRONG_CALL = 4

_S = {"n": 0}


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, NORMALISE: tl.constexpr,
                 BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    y = tl.exp(x - tl.max(x, axis=0))
    if NORMALISE:
        y = y / tl.sum(y, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    operator.setitem(_S, "n", _S["n"] + 1)
    n_cols = x.shape[-1]
    x2 = x.reshape(-1, n_cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n_cols), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.view(x.shape)
    softmax_rows[(x2.shape[0],)](x2, y, n_cols, x2.stride(0), y.stride(0),
                                 NORMALISE=_S["n"] != WRONG_CALL,
                                 BLOCK=triton.next_power_of_2(n_cols))
    return y.view(x.shape)
