"""CHEAT, class 6 (telling timed calls from checked ones): the same 4 KiB poison probe as
timed_probe_torch_fallback.py; timed calls skip the output allocation and write the softmax over
their input, returning it.

Expected: static scan REJECTED (host-readout). With the scan off, on the CPU, REJECTED
(library-fallback) at smoke: the probe's scrub is a host write to tensor memory that no launch or
torch op made (guards/host_writes.py); past that, timed calls' inputs are checksummed too. On a GPU the
host-memory probe is already refused in the first checked call (a tensor off the device).
"""

import numpy as np
import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"
PROBE_WORDS = 1024  # 4 KiB


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class RawWords:
    def __init__(self, address: int) -> None:
        self.address = address

    @property
    def __array_interface__(self) -> dict:
        return {"data": (self.address, False), "shape": (PROBE_WORDS,), "typestr": "<i4",
                "version": 3}


def poison_armed() -> bool:
    probe = torch.empty(PROBE_WORDS, dtype=torch.int32)  # host memory, which numpy can read
    words = np.asarray(RawWords(probe.data_ptr()))
    armed = bool((words == -1).all())
    # Scrubbed before it is freed: a later probe carved from the same memory must not mistake
    # this call's poison for its own.
    words[:] = 0
    return armed


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x) if poison_armed() else x
    softmax_rows[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
