"""CHEAT, class 3 (hunting the reference in memory): walks every object the garbage collector
tracks for a float64 tensor of the output's shape (the harness computes its references on upcast
inputs), or for anything with a tensor `ref` attribute, and has a Triton kernel copy it into the
output. When the hunt finds nothing, the output is zeros.

Expected: static scan REJECTED (import-not-allowed: gc). With the scan off, FAIL: the candidate
process holds no reference (the judge, its parent process, does), so the zeros are judged.
"""

import gc

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"


@triton.jit
def copy_or_zero(src_ptr, y_ptr, n_cols, stride_src, stride_y, HAVE: tl.constexpr,
                 BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if HAVE:
        v = tl.load(src_ptr + row * stride_src + cols, mask=mask, other=0.0)
    else:
        v = tl.zeros([BLOCK], dtype=tl.float32)
    tl.store(y_ptr + row * stride_y + cols, v.to(y_ptr.dtype.element_ty), mask=mask)


def hunt(shape: torch.Size):
    for obj in gc.get_objects():
        try:
            found = obj if isinstance(obj, torch.Tensor) else getattr(obj, "ref", None)
            if (isinstance(found, torch.Tensor) and found.dtype == torch.float64
                    and found.shape == shape):
                return found
        except Exception:
            continue
    return None


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    ref = hunt(x.shape)
    src = ref.to(device=x.device, dtype=torch.float32).contiguous() if ref is not None else y
    copy_or_zero[(x.shape[0],)](src, y, x.shape[1], src.stride(0), y.stride(0),
                                HAVE=ref is not None, BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
