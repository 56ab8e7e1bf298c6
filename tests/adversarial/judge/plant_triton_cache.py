"""CHEAT (class 4): plants a file where Triton's shared cache used to be (the next GPU
candidate would load a cuda_utils library from there before its sandbox) and in the cache it
is given. Expected (scan off): nothing survives the run: its Triton cache is private and
deleted with its directory, and the judge's cache is out of its reach (Landlock)."""

import os
from pathlib import Path

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


MARK = "planted-by-redteam"


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    mine = Path(os.environ.get("TRITON_CACHE_DIR", "."))
    (mine / ("0" * 64)).mkdir(exist_ok=True)
    (mine / ("0" * 64) / "cuda_utils.so").write_text(MARK)
    for shared in (mine.parent.parent.parent, Path.home()):
        try:
            (shared / "triton-trusted").mkdir(exist_ok=True)
            (shared / "triton-trusted" / "cuda_utils.so").write_text(MARK)
        except OSError:
            pass
    return softmax(x)
