"""CHEAT (side stream, without torch.cuda.Stream or torch.cuda.stream): enters the generic
torch.Stream as a context manager, so its launch runs off the timer's stream.

Expected: static scan REJECTED (side-stream). On a GPU with the scan off: REJECTED (side-stream),
from the launch monitor's stream check. On the CPU there are no streams to escape to.
"""

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
    with torch.Stream(device=x.device):
        return softmax(x)
