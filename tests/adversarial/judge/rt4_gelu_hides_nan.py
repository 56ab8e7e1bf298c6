"""WRONG (non-finite gap: NaN inputs of an elementwise op).

The gelu starter, except that a NaN input element gives 0 instead of NaN (so a diverged
activation turns into a plausible one). torch's gelu propagates NaN.
"""


import functools
from typing import Any, NamedTuple

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
    x = tl.where(x == x, x, 0.0)  # NaN becomes 0: gelu(0) = 0, a plausible activation
    if TANH:
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # √(2/π)·(x + 0.044715·x³)
        tanh_u = 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)
        y = 0.5 * x * (1.0 + tanh_u)
    else:
        y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))  # erf(x/√2)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=inside)


class Launch(NamedTuple):
    """A planned launch: the kernel, its grid, every argument after the leading tensors (sizes,
    strides, scalars, constexprs, in signature order), its options, and the kernel compiled for
    them (None under the interpreter, which compiles nothing)."""

    kernel: Any
    grid: tuple[int, int, int]
    args: tuple[Any, ...]
    options: dict[str, int]
    compiled: Any


def _compile(kernel: Any, grid: tuple[int, int, int], tensor_dtypes: tuple[torch.dtype, ...],
             args: tuple[Any, ...], **options: int) -> Launch:
    """Compile `kernel` ahead for tensors of `tensor_dtypes` followed by `args`.

    Triton specializes a compiled kernel on its integer arguments (equal to 1, divisible by 16)
    and on each pointer's 16-byte alignment. Warming up with dtypes in place of tensors compiles
    the aligned-pointer variant, and `args` are the very values every launch of the plan passes.
    The interpreter's warm-up compiles nothing (None), as does a kernel without one.
    """
    warmup = getattr(kernel, "warmup", None)
    compiled = None if warmup is None else warmup(*tensor_dtypes, *args, grid=grid, **options)
    return Launch(kernel, grid, args, options, compiled)


def _launch(launch: Launch, *tensors: torch.Tensor) -> None:
    """Launch on `tensors` (the kernel's leading pointer arguments). Straight through the compiled
    kernel when every pointer is 16-byte aligned, as it was compiled for and as every fresh
    allocation is; a view at an odd offset goes through Triton's JIT, which specializes on it."""
    if launch.compiled is not None and _aligned(tensors):
        launch.compiled[launch.grid](*tensors, *launch.args)
    else:
        launch.kernel[launch.grid](*tensors, *launch.args, **launch.options)


def _aligned(tensors: tuple[torch.Tensor, ...]) -> bool:
    """Every pointer 16-byte aligned (a plain loop: `all()` over a generator took ~1 µs more)."""
    for t in tensors:
        if t.data_ptr() % 16:
            return False
    return True


@functools.lru_cache(maxsize=1024)
def _plan(n_elements: int, tanh: bool, dtype: torch.dtype, device: int) -> Launch:
    """The launch for n_elements of x (flat, contiguous) in `dtype`, y alike. Cached by its
    arguments, which are plain values, so a call pays a dictionary lookup; `device` (the current
    CUDA device, -1 for CPU tensors) is part of the key because a compiled kernel is loaded on
    one device."""
    return _compile(_gelu_kernel, (triton.cdiv(n_elements, BLOCK), 1, 1), (dtype, dtype),
                    (n_elements, tanh, BLOCK), num_warps=NUM_WARPS)


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
    device = torch.cuda.current_device() if x.is_cuda else -1
    _launch(_plan(n_elements, approximate == "tanh", x.dtype, device), x, y)
    return y
