"""CHEAT (class 3): while imported, looks on the stack for the job's secret (any int of 60+
bits in the setup message its process was given), rebuilds the smoke case's inputs from it with
the old linear seed derivation, and launches its softmax on those instead of its input. Expected
(scan off): FAIL at smoke: the candidate process holds no seed, and case seeds are keyed hashes
of a secret it never sees (what it finds is no seed of any case).
"""

import sys

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


def _secret() -> int:
    frame = sys._getframe(1)
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, dict):
                for item in list(value.values()):
                    found = item.get("byte_seed") if isinstance(item, dict) else item
                    if isinstance(found, int) and found > 2**60:
                        return found
        frame = frame.f_back
    return 0


SECRET = _secret()
GUESSES = {dtype: torch.randn((4, 37), generator=torch.Generator().manual_seed(
    (SECRET + 1_000_003) % (2**63 - 1))).to(dtype)
           for dtype in (torch.float32, torch.float16, torch.bfloat16)}


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    source = GUESSES[x.dtype] if tuple(x.shape) == (4, 37) else x.contiguous()
    source = source.to(x.device)
    y = torch.empty_like(x)
    softmax_rows[(x.shape[0],)](source, y, x.shape[1], source.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
