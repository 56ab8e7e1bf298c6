"""CHEAT, class 2 (an allowed op's kernel re-registered): `torch.library.Library("aten", "IMPL")`
replaces the CPU and CUDA kernels of `aten::ones_like`, an allocation op on the recorder's
allow-list, with one that returns the softmax of its argument. The recorder sees `ones_like`.

Expected: static scan REJECTED (op-registration); with the scan off, REJECTED (tampering) right
after import: the dispatcher's tables for aten ops changed.
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


def softmax_named_ones_like(x, *, dtype=None, layout=None, device=None, pin_memory=None,
                            memory_format=None):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


OVERRIDES = torch.library.Library("aten", "IMPL")
OVERRIDES.impl("ones_like", softmax_named_ones_like, "CPU")
OVERRIDES.impl("ones_like", softmax_named_ones_like, "CUDA")


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    staged = torch.empty_like(x)
    copy_rows[(x.shape[0],)](x, staged, x.shape[1], x.stride(0), staged.stride(0),
                             BLOCK=triton.next_power_of_2(x.shape[1]))
    return torch.ones_like(staged)
