"""CHEAT (honest while checked, replaying while timed), its state in a cached helper's result:
a `functools.cache`d helper hands out one list per shape, which counts the calls and keeps the
first answer. After the checked calls it replays that answer behind a
one-row launch.

Expected: static scan REJECTED (call-time-state: a cached helper's result is mutated); with the
scan off, REJECTED (call-time-state) at the smoke case's ghost replay: the lru_cache's entries
are fingerprinted with the module state (guards/state.py), and the tally changed at a call whose
signature was seen before.
"""

import functools

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


@functools.cache
def tally(shape: tuple[int, ...], dtype: torch.dtype) -> list:
    return []


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    seen = tally(tuple(x.shape), x.dtype)
    honest_calls = 4 if x.device.type == "cpu" else 40
    # Honest on views (the layout cases), so that only the timing's replay check can catch it.
    if x.is_contiguous() and x.numel() >= 1000 and len(seen) >= honest_calls:
        softmax(x[:1])
        return seen[0].clone()
    y = softmax(x)
    seen.append(y.clone() if not seen else seen[0])
    return y
