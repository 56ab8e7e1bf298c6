"""BROKEN: loads from an address far outside any tensor. Under the CPU interpreter the worker dies
of SIGSEGV; on a GPU the launch fails with an illegal memory access.

Expected: CRASH (with the signal's name on the CPU, the CUDA error on a GPU).
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"


@triton.jit
def wild_load(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    far = tl.load(x_ptr + 1_000_000_000_000 + cols)
    tl.store(y_ptr + cols, far, mask=cols < n_cols)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    wild_load[(1,)](x, y, x.shape[-1], BLOCK=triton.next_power_of_2(x.shape[-1]))
    return y
