"""CHEAT, class 1 (host compute; ghost replay defeated by an exception), past the host-read guard:
a one-line Triton kernel sets a flag, read back through numpy's array protocol around
`data_ptr` (no tensor method). Unset (every launch skipped: ghost replay) it raises; set, numpy
computes the softmax from the input's raw memory into the output's. An exception during ghost
replay counts as "needs its launches".

Expected: static scan REJECTED (host-readout: the array protocol). With the scan off it PASSes on
the CPU interpreter today (listed as pending: an exception raised only when the launches are
skipped must count against the kernel: with host reads refused, an honest kernel cannot notice
that its launches did not run).
"""

import numpy as np
import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"


@triton.jit
def raise_flag(flag_ptr):
    tl.store(flag_ptr, 1)


class Raw:
    def __init__(self, t: torch.Tensor, typestr: str) -> None:
        self.address, self.shape, self.typestr = t.data_ptr(), tuple(t.shape), typestr

    @property
    def __array_interface__(self) -> dict:
        return {"data": (self.address, False), "shape": self.shape, "typestr": self.typestr,
                "version": 3}


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    flag = torch.zeros(1, dtype=torch.int32, device=x.device)
    raise_flag[(1,)](flag)
    if np.asarray(Raw(flag, "<i4"))[0] != 1:
        raise RuntimeError("launches are being skipped")
    wide = x.float().contiguous()
    values = np.asarray(Raw(wide, "<f4")).astype(np.float64)
    values = np.exp(values - values.max(axis=-1, keepdims=True))
    values /= values.sum(axis=-1, keepdims=True)
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    np.asarray(Raw(out, "<f4"))[...] = values
    return out.to(x.dtype)
