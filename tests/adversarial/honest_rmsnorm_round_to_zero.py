"""HONEST: an RMSNorm that rounds its fp16/bf16 output toward zero instead of to nearest, so
about half its elements sit one ulp from the correctly rounded reference. A correct kernel in
every other respect.

Expected: PASS. Never rejected for honest rounding.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rmsnorm"
BACKEND = "triton"


@triton.jit
def rmsnorm_rows(x_ptr, w_ptr, y_ptr, n_cols, eps, stride_x, stride_y, BLOCK: tl.constexpr,
                 ROUND_TO_ZERO: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = x * rstd * w
    if ROUND_TO_ZERO:
        y = y.to(y_ptr.dtype.element_ty, fp_downcast_rounding="rtz")
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    rmsnorm_rows[(x2.shape[0],)](x2, weight, y, x2.shape[1], eps, x2.stride(0), y.stride(0),
                                 BLOCK=triton.next_power_of_2(x2.shape[1]),
                                 ROUND_TO_ZERO=x.dtype != torch.float32)
    return y.view(x.shape)
