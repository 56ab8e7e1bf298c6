"""CHEAT, class 1 (host compute through Python lists): RMSNorm computed with `math` on
`Tensor.tolist()` of a Triton-made copy of the input (so with every launch skipped the copy is
poison and the answer wrong: ghost replay is satisfied), handed back through `torch.tensor`.

Expected: static scan REJECTED (host-readout: `.tolist()`); with the scan off, the host-read guard
raises on `Tensor.tolist` in the first checked call.
"""

import math

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rmsnorm"
BACKEND = "triton"


@triton.jit
def copy_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask)
    tl.store(y_ptr + row * stride_y + cols, x.to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    work = torch.empty(x2.shape, dtype=torch.float32, device=x.device)
    copy_rows[(x2.shape[0],)](x2, work, x2.shape[1], x2.stride(0), work.stride(0),
                              BLOCK=triton.next_power_of_2(x2.shape[1]))
    gains = weight.float().tolist()
    rows = []
    for row in work.tolist():
        scale = 1.0 / math.sqrt(sum(v * v for v in row) / len(row) + eps)
        rows.append([v * scale * g for v, g in zip(row, gains)])
    return torch.tensor(rows, dtype=torch.float32, device=x.device).to(x.dtype).view(x.shape)
