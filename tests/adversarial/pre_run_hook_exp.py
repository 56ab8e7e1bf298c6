"""CHEAT, class 2 (torch compute inside Triton's launch path): five Triton kernels with empty
bodies, each given a torch function as its pre-run hook (`JITFunction.add_pre_run_hook`). Triton
calls the hook with the launch's arguments, so `amax`, `sub`, `exp`, `sum` and `div` run with
`out=` the launch's buffers, inside the launch, where the op recorder took them for Triton's own
internals (the hooks are C functions: no Python frame of the kernel file is on the stack). With
the launches skipped the hooks do not run either, so ghost replay sees a wrong answer.

Expected: static scan REJECTED (launch-hook); with the scan off, REJECTED (tampering: a Triton
pre-run hook), and the recorder refuses the compute ops inside a launch anyway.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"


@triton.jit
def reduce_max(input, dim: tl.constexpr, keepdim: tl.constexpr, out):
    pass


@triton.jit
def subtract(input, other, out):
    pass


@triton.jit
def exponentiate(input, out):
    pass


@triton.jit
def reduce_sum(input, dim: tl.constexpr, keepdim: tl.constexpr, out):
    pass


@triton.jit
def divide(input, other, out):
    pass


reduce_max.add_pre_run_hook(torch.amax)
subtract.add_pre_run_hook(torch.sub)
exponentiate.add_pre_run_hook(torch.exp)
reduce_sum.add_pre_run_hook(torch.sum)
divide.add_pre_run_hook(torch.div)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    wide = x.float()
    rows = x.shape[0]
    peak = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    shifted = torch.empty_like(wide)
    total = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    y = torch.empty_like(x)
    reduce_max[(1,)](wide, -1, True, out=peak)
    subtract[(1,)](wide, peak, out=shifted)
    exponentiate[(1,)](shifted, out=shifted)
    reduce_sum[(1,)](shifted, -1, True, out=total)
    divide[(1,)](shifted, total, out=y)
    return y
