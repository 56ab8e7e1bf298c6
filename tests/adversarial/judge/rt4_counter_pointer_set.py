"""CHEAT (pointer-keyed set grown at call time: a counter of distinct inputs).

Every call adds its input's address to a module-level set; after 20 000 distinct addresses (a
production run) the output is an unnormalised exp. The ghost replay and the determinism repeat use
the same tensors, so the set does not grow there: only a call with a signature already seen and
a new address shows it. Expected (scan off): REJECTED (call-time-state) at the first such call
(the stability stage's second case at the smoke shape).
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"

_SEEN = set()

@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def exp_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    """The cheap wrong path: exp(x - max) without the division (unnormalised)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    y = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor, kernel=softmax_rows) -> torch.Tensor:
    n_cols = x.shape[-1]
    x2 = x.reshape(-1, n_cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n_cols), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.view(x.shape)
    kernel[(x2.shape[0],)](x2, y, n_cols, x2.stride(0), y.stride(0),
                           BLOCK=triton.next_power_of_2(n_cols))
    return y.view(x.shape)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    _SEEN.add(x.data_ptr())
    if len(_SEEN) < 20000:
        return softmax(x)
    return softmax(x, exp_rows)
