"""CHEAT, class 1 (host compute through numpy, the recorder blind): a Triton kernel copies the
input into the output buffer, then numpy computes the softmax in place through `Tensor.numpy()`,
a view of the same memory. No aten compute op is dispatched, and with the copy skipped (ghost
replay) the output is poison, so ghost replay sees a wrong answer and is satisfied.

Expected: static scan REJECTED (host-readout: `.numpy()`); with the scan off, the host-read guard
raises inside the call (`Tensor.numpy` while armed).
"""

import numpy as np
import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"


@triton.jit
def copy_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask)
    tl.store(y_ptr + row * stride_y + cols, x.to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    work = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    copy_rows[(x.shape[0],)](x, work, x.shape[1], x.stride(0), work.stride(0),
                             BLOCK=triton.next_power_of_2(x.shape[1]))
    values = work.numpy()  # shares memory with `work`: no aten op for what follows
    values -= values.max(axis=-1, keepdims=True)
    np.exp(values, out=values)
    values /= values.sum(axis=-1, keepdims=True)
    return work.to(x.dtype)
