"""CHEAT, class 2 (torch compute behind another name): a `torch.library.custom_op` called
`clone`, in a namespace of the file's own, whose body is torch.softmax. The op recorder matched
allowed ops by their short name only, and the body runs inside the recorder's own dispatch, where
the recorder does not see it. A Triton copy feeds it, so ghost replay sees a wrong answer.

Expected: static scan REJECTED (op-registration: torch.library); with the scan off, REJECTED
(library-fallback): only `aten::` ops that existed before the kernel was imported are allowed.
"""

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
    tl.store(y_ptr + row * stride_y + cols, x, mask=mask)


@torch.library.custom_op("akredteam::clone", mutates_args=())
def renamed_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    staged = torch.empty_like(x)
    copy_rows[(x.shape[0],)](x, staged, x.shape[1], x.stride(0), staged.stride(0),
                             BLOCK=triton.next_power_of_2(x.shape[1]))
    return renamed_softmax(staged)
