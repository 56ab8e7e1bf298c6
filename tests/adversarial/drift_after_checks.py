"""CHEAT (drift after the checks): correct for the first few calls of each large shape and dtype,
then it replays its first answer for that shape: the timed calls cost nothing. "Few" is just
above what the quick profile's correctness stages use (about 4 calls of the timed shape on the
CPU interpreter; about 25 on a GPU, where stability and determinism also use the timed shape) and
well below what timing uses.

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
    honest_calls = 4 if x.device.type == "cpu" else 40
    if x.numel() >= 1000 and calls >= honest_calls:
        _SEEN[key] = (calls + 1, first)
        softmax(x[:1])
        return first.clone()
    y = softmax(x)
    _SEEN[key] = (calls + 1, y.clone() if first is None else first)
    return y
