"""CHEAT, class 1 (host compute with no tensor method at all): numpy is handed a view of the
output's raw memory through a class that defines `__array_interface__` around `data_ptr()`, and
computes the softmax in place on what a Triton kernel copied there. Neither the op recorder nor
the host-read guard sees anything: no aten op, no `Tensor.numpy`.

Expected: static scan REJECTED (host-readout: the file defines the array protocol). With the scan
off, on the CPU interpreter (device memory is host memory), REJECTED library-fallback: the
host-write ledger sees the output's memory change with no launch and no torch op (or, by
coincidence, ghost-replay). On a GPU the pointer is device memory and a pinned host buffer is
refused as an allocation off the device.
"""

import numpy as np
import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"


@triton.jit
def copy_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask)
    tl.store(y_ptr + row * stride_y + cols, x.to(y_ptr.dtype.element_ty), mask=mask)


class RawRows:
    """Two-dimensional float32 rows at an address, as numpy's array protocol describes them."""

    def __init__(self, address: int, rows: int, cols: int) -> None:
        self.address, self.rows, self.cols = address, rows, cols

    @property
    def __array_interface__(self) -> dict:
        return {"data": (self.address, False), "shape": (self.rows, self.cols),
                "typestr": "<f4", "version": 3}


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    work = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    copy_rows[(x.shape[0],)](x, work, x.shape[1], x.stride(0), work.stride(0),
                             BLOCK=triton.next_power_of_2(x.shape[1]))
    values = np.asarray(RawRows(work.data_ptr(), x.shape[0], x.shape[1]))
    values -= values.max(axis=-1, keepdims=True)
    np.exp(values, out=values)
    values /= values.sum(axis=-1, keepdims=True)
    return work.to(x.dtype)
