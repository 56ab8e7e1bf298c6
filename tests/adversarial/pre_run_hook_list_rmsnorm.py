"""CHEAT, class 2 (torch compute inside Triton's launch path, without add_pre_run_hook): RMSNorm
from torch functions appended straight to empty Triton kernels' `pre_run_hooks` lists. Triton
calls them with the launch's arguments, inside the launch.

Expected: static scan REJECTED (launch-hook: `pre_run_hooks`); with the scan off, REJECTED
(tampering: a Triton pre-run hook found at launch).
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rmsnorm"
BACKEND = "triton"


@triton.jit
def multiply(input, other, out):
    pass


@triton.jit
def mean_rows(input, dim: tl.constexpr, keepdim: tl.constexpr, out):
    pass


@triton.jit
def add_scalar(input, other: tl.constexpr, out):
    pass


@triton.jit
def reciprocal_sqrt(input, out):
    pass


multiply.pre_run_hooks.append(torch.mul)
mean_rows.pre_run_hooks.append(torch.mean)
add_scalar.pre_run_hooks.append(torch.add)
reciprocal_sqrt.pre_run_hooks.append(torch.rsqrt)


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    wide = x.float()
    squares = torch.empty_like(wide)
    scale = torch.empty(x.shape[:-1] + (1,), dtype=torch.float32, device=x.device)
    y = torch.empty_like(x)
    multiply[(1,)](wide, wide, out=squares)
    mean_rows[(1,)](squares, -1, True, out=scale)
    add_scalar[(1,)](scale, eps, out=scale)
    reciprocal_sqrt[(1,)](scale, out=scale)
    multiply[(1,)](wide, scale, out=squares)
    multiply[(1,)](squares, weight.float(), out=y)
    return y
