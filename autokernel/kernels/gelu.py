"""GELU starter: y = x·Φ(x) elementwise (approximate="tanh": the tanh form), in x's dtype.

x may have any shape; it is read as one flat contiguous array.

Algorithm
- One kernel, `_gelu_kernel`: a program owns BLOCK consecutive elements, loads them (masked at
  the end), computes in float32 and stores in x's dtype. The erf form uses tl.math.erf; the tanh
  form writes tanh(u) as 1 - 2/(exp(2u) + 1), which saturates to ±1 when exp overflows to inf or
  underflows to 0, so huge inputs give x or 0, never NaN.
- Offsets are int64, so tensors over 2³¹ elements index correctly.

Tunables
- BLOCK: elements per program (a power of two).
- NUM_WARPS: warps per program.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "gelu"
BACKEND = "triton"

BLOCK = 1024
NUM_WARPS = 4
TUNABLE_SPACE = {
    "BLOCK": [256, 512, 1024, 2048, 4096],
    "NUM_WARPS": [1, 2, 4, 8],
}

@triton.jit
def _gelu_kernel(x_ptr, y_ptr, n_elements, TANH: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offsets = start + tl.arange(0, BLOCK)
    inside = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    if TANH:
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # √(2/π)·(x + 0.044715·x³)
        tanh_u = 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)
        y = 0.5 * x * (1.0 + tanh_u)
    else:
        y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))  # erf(x/√2)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=inside)


def kernel_fn(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', not {approximate!r}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise NotImplementedError(f"dtype {x.dtype} is not supported")
    x = x.contiguous()
    y = torch.empty_like(x)
    n_elements = x.numel()
    if n_elements == 0:
        return y
    grid = (triton.cdiv(n_elements, BLOCK),)
    _gelu_kernel[grid](x, y, n_elements, TANH=approximate == "tanh", BLOCK=BLOCK,
                       num_warps=NUM_WARPS)
    return y
