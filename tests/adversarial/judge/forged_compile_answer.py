"""CHEAT (class 10): a @triton.jit body that computes with numpy, and a module that, when it is
imported for compiling (Triton not interpreting), prints the compile gate's answer, "every launch
compiled", and exits before any compile. Expected: FAIL (gpu-compile): the gate's answer comes
on a private pipe, once every request was tried; an import that exits gives none."""

import numpy as np

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"


@triton.jit
def softmax_numpy(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    shifted = x - tl.max(x, axis=0)
    numerator = tl.exp(shifted) * float(np.exp(0.0))  # numpy, run as Python
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


if isinstance(softmax_numpy, triton.runtime.jit.JITFunction):  # compiling, not interpreting
    print('{"results": [{"kernel": "softmax_numpy", "context": "smoke", "ok": true, '
          '"error": ""}]}')
    raise SystemExit(0)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    softmax_numpy[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                 BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
