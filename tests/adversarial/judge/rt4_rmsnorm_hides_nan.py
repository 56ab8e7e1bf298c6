"""WRONG (non-finite gap: NaN and inf inputs of the norms).

An rmsnorm that silently replaces every NaN and +-inf element of x with 0 before normalising
(and so returns finite numbers where torch returns NaN). In training this hides a divergence
(a NaN activation turns into a plausible-looking row instead of propagating to the loss). The
judge injects NaN/inf inputs only for softmax (cases.NONFINITE_TYPES), so nothing checks what an
rmsnorm does with them.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rmsnorm"
BACKEND = "triton"


@triton.jit
def rmsnorm_rows(x_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_y, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.where(tl.abs(x) < float("inf"), x, 0.0)  # NaN and +-inf become 0
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * stride_y + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, axis: int = -1):
    if axis not in (-1, x.ndim - 1):
        raise ValueError("last dim only")
    n_cols = x.shape[-1]
    x2 = x.reshape(-1, n_cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    y = torch.empty((x2.shape[0], n_cols), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.view(x.shape)
    rmsnorm_rows[(x2.shape[0],)](x2, w, y, n_cols, x2.stride(0), y.stride(0), eps,
                                 BLOCK=triton.next_power_of_2(n_cols))
    return y.view(x.shape)
