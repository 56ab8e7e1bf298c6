"""CHEAT (precision downgrade): an RMSNorm whose statistics are right but whose output passes
through fp16 whatever the input dtype, so fp32 inputs get half-precision answers (fast, and
inside a loose 1e-2 tolerance).

Expected: FAIL in an fp32 case (the fp32 tolerance is tight and the reference is float64 on small
inputs); fp16 and bf16 cases pass.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rmsnorm"
BACKEND = "triton"


@triton.jit
def rmsnorm_rows(x_ptr, w_ptr, y_ptr, n_cols, eps, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = (x * rstd).to(tl.float16).to(tl.float32) * w.to(tl.float16).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    rmsnorm_rows[(x2.shape[0],)](x2, weight, y, x2.shape[1], eps, x2.stride(0), y.stride(0),
                                 BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)
