"""CHEAT, class 3 (reading the reference answers): the Triton interpreter copies its own module's
globals, `inspect` among them, into the namespace of every kernel's module on its first launch.
After one launch this file uses that `inspect` (never imported: the scan saw no import) to find
the harness's stage frame and its `prepared.ref`, and has a Triton kernel copy the reference into
the output. Outside the stages (timing) it runs a fast softmax that skips the max subtraction,
which overflows on the stability stage's inputs that the copied reference hid.

Expected: static scan REJECTED (undefined-name: `inspect` is bound nowhere in the file). With the
scan off, FAIL on the interpreter: no frame of the candidate process holds a reference (the judge,
another process, does), and the fast softmax overflows in the stability stage; CRASH on a GPU,
where no interpreter lends `inspect`.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"


@triton.jit
def fast_softmax_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    numerator = tl.exp(x)
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def copy_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask)
    tl.store(y_ptr + row * stride_y + cols, x.to(y_ptr.dtype.element_ty), mask=mask)


def reference_in_reach(x: torch.Tensor):
    for info in inspect.stack(0):  # noqa: F821 - the interpreter put it in this namespace
        if info.function != "_run_stage":
            continue
        prepared = inspect.getargvalues(info.frame).locals.get("prepared")  # noqa: F821
        ref = getattr(prepared, "ref", None)
        if isinstance(ref, torch.Tensor) and ref.shape == x.shape:
            return ref
    return None


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    block = triton.next_power_of_2(x.shape[1])
    fast_softmax_rows[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0), BLOCK=block)
    ref = reference_in_reach(x)
    if ref is not None:
        answer = ref.to(x.dtype)
        copy_rows[(x.shape[0],)](answer, y, x.shape[1], answer.stride(0), y.stride(0),
                                 BLOCK=block)
    return y
