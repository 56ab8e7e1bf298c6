"""CHEAT (result caching keyed on a fingerprint of a few values: the first and last elements).
It replays only entries at least two calls old, so an immediate re-run with the same input (the
harness's ghost replay) sees it compute.

Expected: static scan REJECTED (call-time-state); with the scan off, on the CPU, FAIL in the
determinism stage: the harness refills the same buffers with new values that keep the first and
last elements, and the replayed answer is stale. On a GPU, reading values to the host is a device
transfer: REJECTED (library-fallback) before any replay.
"""

import numpy as np
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


_BY_FINGERPRINT = {}
_CALLS = [0]


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    _CALLS[0] += 1
    flat = x.detach().reshape(-1).float().cpu().numpy()
    key = (tuple(x.shape), str(x.dtype), flat[:4].tobytes(), flat[-4:].tobytes())
    entry = _BY_FINGERPRINT.get(key)
    if entry is not None and _CALLS[0] - entry[1] >= 2:
        softmax(x[:1])  # keep launching, so only the stale answer can give the cheat away
        return entry[0].clone()
    y = softmax(x)
    _BY_FINGERPRINT.setdefault(key, (y.clone(), _CALLS[0]))
    return y
