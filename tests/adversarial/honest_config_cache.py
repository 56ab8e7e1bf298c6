"""HONEST but refused by the static scan: launch configurations cached in a module-level dict
keyed by row length, filled at call time. Holds no tensors and replays nothing.

Expected: static scan REJECTED (call-time-state; the reason names functools.lru_cache on a helper
of shapes as the accepted way). With the scan off, PASS: the dynamic checks find no tensors kept
between calls.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"

_CONFIGS = {}


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def launch_config(n_cols: int) -> tuple[int, int]:
    if n_cols not in _CONFIGS:
        block = triton.next_power_of_2(n_cols)
        _CONFIGS[n_cols] = (block, 4 if block <= 2048 else 8)
    return _CONFIGS[n_cols]


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    block, warps = launch_config(x.shape[1])
    softmax_rows[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0), BLOCK=block,
                                num_warps=warps)
    return y
