"""CHEAT, class 1 (host compute, ghost replay defeated by an exception): a one-line Triton kernel
sets a flag; the host reads it and raises when it is unset (every launch skipped: the harness's
ghost replay), and otherwise computes the whole answer with numpy and hands it back through
`torch.from_numpy`. An exception during ghost replay counts as "needs its launches", so the
cheat is never replayed successfully.

Expected: static scan REJECTED (host-readout); with the scan off, the host-read guard raises on
`Tensor.numpy` in the first checked call. (Worker change pending: an exception during ghost replay
must not count as fine when the real call's output was right.)
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


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    flag = torch.zeros(1, dtype=torch.int32, device=x.device)
    raise_flag[(1,)](flag)
    if flag.numpy()[0] != 1:
        raise RuntimeError("launches are being skipped")
    values = x.float().numpy().astype(np.float64)
    values = np.exp(values - values.max(axis=-1, keepdims=True))
    values /= values.sum(axis=-1, keepdims=True)
    return torch.from_numpy(values).to(x.dtype)
