"""CHEAT, class 4 (a shell through an allowed module): `torch.utils.collect_env.run` hands its
argument to a shell. This file proves it ran one by raising with the shell's arithmetic.

Expected: static scan REJECTED (module-escape: collect_env). With the scan off the shell runs today
and the reason carries its output: CRASH with "escaped-42" (listed as pending: the OS sandbox must
refuse to execute a shell).
"""

import torch
import torch.utils.collect_env
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


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    code, out, err = torch.utils.collect_env.run("echo escaped-$((6*7))")
    raise RuntimeError(f"shell exit {code}: {out.strip()} {err.strip()}")
