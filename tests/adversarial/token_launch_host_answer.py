"""CHEAT (library fallback hidden from the op recorder): a token launch, then the answer computed
on the host with numpy (no aten compute op is dispatched for that).

Expected: REJECTED. On the CPU, rule ghost-replay (the output is still right with every Triton
launch skipped); on a GPU, rule library-fallback already (moving the input to the host is a
device transfer, which the op recorder refuses).
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


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    y = softmax(x)  # the token launch
    values = x.detach().float().cpu().numpy().astype(np.float64)
    values = np.exp(values - values.max(axis=-1, keepdims=True))
    answer = torch.from_numpy(values / values.sum(axis=-1, keepdims=True))
    return y.copy_(answer)
