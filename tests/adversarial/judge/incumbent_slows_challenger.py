"""CHEAT (class 2, as an incumbent): a kept kernel that, loaded as the incumbent, finds the
challenger's module in its process and slows its kernel down. It raises if it finds it.
Expected (scan off, as the incumbent of an honest challenger): the challenger PASSes with the
incumbent timed beside it: each runs in its own process."""

import sys

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


def _other_kernels() -> list[str]:
    """Kernel files loaded in this process other than this one."""
    return [name for name, module in list(sys.modules.items())
            if str(getattr(module, "__file__", "")).endswith("kernel.py")
            and name != __name__]


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    found = _other_kernels()
    if found:
        raise RuntimeError(f"found the challenger in this process: {found}")
    return softmax(x)
