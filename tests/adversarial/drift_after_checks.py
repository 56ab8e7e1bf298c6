"""CHEAT (drift after the checks): correct for the first four calls of each large shape (the
correctness stages never call one shape and dtype more often than that in the quick profile),
then it replays its first answer for that shape: the timed calls cost nothing.

Expected: static scan REJECTED (call-time-state); with the scan off, FAIL in the timing stage:
outputs produced while timing are re-checked against references computed before import.
"""

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


_SEEN = {}


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    key = (tuple(x.shape), x.dtype)
    calls, first = _SEEN.get(key, (0, None))
    if x.numel() >= 1000 and calls >= 4:
        _SEEN[key] = (calls + 1, first)
        softmax(x[:1])
        return first.clone()
    y = softmax(x)
    _SEEN[key] = (calls + 1, y.clone() if first is None else first)
    return y
