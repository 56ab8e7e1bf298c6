"""CHEAT, class 4 (raw memory through an allowed module): `numpy.ctypeslib` carries ctypes with
it; `as_ctypes_type(float32) * n` and `.from_address(data_ptr)` give numpy a view of any address.
Used here for a host softmax over a Triton-made copy of the input (so ghost replay sees poison),
with no tensor method but `data_ptr` and no aten compute op.

Expected: static scan REJECTED (module-escape: ctypeslib). With the scan off, on the CPU
interpreter, REJECTED library-fallback: the host-write ledger sees the output's memory change with
no launch and no torch op (or, by coincidence, ghost-replay; on a GPU the address is device
memory).
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


def host_view(t: torch.Tensor) -> np.ndarray:
    cells = np.ctypeslib.as_ctypes_type(np.float32) * t.numel()
    return np.ctypeslib.as_array(cells.from_address(t.data_ptr())).reshape(t.shape)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    work = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    copy_rows[(x.shape[0],)](x, work, x.shape[1], x.stride(0), work.stride(0),
                             BLOCK=triton.next_power_of_2(x.shape[1]))
    values = host_view(work)
    values -= values.max(axis=-1, keepdims=True)
    np.exp(values, out=values)
    values /= values.sum(axis=-1, keepdims=True)
    return work.to(x.dtype)
