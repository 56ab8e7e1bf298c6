"""WRONG (layout gap: heads and batch not uniformly strided).

The rotary starter with one change on the host side: the batch and head strides passed to the
kernel are derived from the position stride (H*S*stride_pos, S*stride_pos) instead of x's own.
That is right for every layout the judge tries (contiguous; row_strided, whose padding keeps
the dims packed behind the position stride; transposed and offset, which the starter makes
contiguous first) and wrong for the most common production layout: q/k as the transpose of a
[B, S, H, D] projection ([B, H, S, D] with stride_head = D, stride_pos = H*D), or a slice of a
fused qkv buffer. The case plan never gives a 4-D input whose leading dims are permuted.
"""

import functools
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rotary_embedding"
BACKEND = "triton"

BLOCK_S = 8
HEADS_PER_PROGRAM = 4
NUM_WARPS = 4
TUNABLE_SPACE = {
    "BLOCK_S": [1, 2, 4, 8, 16, 32],
    "HEADS_PER_PROGRAM": [1, 2, 4, 8],
    "NUM_WARPS": [1, 2, 4, 8],
}

# Grid axes 1 and 2 (head groups, batch) are limited to 65535 programs by CUDA.
MAX_GRID_YZ = 65535


@triton.jit
def _rotary_kernel(
    x_ptr,
    cos_ptr,
    sin_ptr,
    out_ptr,
    seq_len,
    n_heads,
    half_dim,
    stride_x_batch,
    stride_x_head,
    stride_x_pos,
    stride_out_batch,
    stride_out_head,
    stride_out_pos,
    stride_cos_pos,
    stride_sin_pos,
    BLOCK_S: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    HEADS_PER_PROGRAM: tl.constexpr,
):
    positions = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)
    first_head = tl.program_id(1) * HEADS_PER_PROGRAM
    batch = tl.program_id(2).to(tl.int64)
    pairs = tl.arange(0, BLOCK_HALF)[None, :]
    rows = positions.to(tl.int64)[:, None]
    tile_mask = (positions < seq_len)[:, None] & (pairs < half_dim)

    cos_lo_at = cos_ptr + rows * stride_cos_pos + pairs
    sin_lo_at = sin_ptr + rows * stride_sin_pos + pairs
    cos_lo = tl.load(cos_lo_at, mask=tile_mask, other=0.0).to(tl.float32)
    cos_hi = tl.load(cos_lo_at + half_dim, mask=tile_mask, other=0.0).to(tl.float32)
    sin_lo = tl.load(sin_lo_at, mask=tile_mask, other=0.0).to(tl.float32)
    sin_hi = tl.load(sin_lo_at + half_dim, mask=tile_mask, other=0.0).to(tl.float32)

    x_batch = x_ptr + batch * stride_x_batch
    out_batch = out_ptr + batch * stride_out_batch
    for i in tl.static_range(HEADS_PER_PROGRAM):
        head = (first_head + i).to(tl.int64)
        mask = tile_mask & (head < n_heads)
        x_lo_at = x_batch + head * stride_x_head + rows * stride_x_pos + pairs
        x_lo = tl.load(x_lo_at, mask=mask, other=0.0).to(tl.float32)
        x_hi = tl.load(x_lo_at + half_dim, mask=mask, other=0.0).to(tl.float32)
        out_lo = x_lo * cos_lo - x_hi * sin_lo
        out_hi = x_hi * cos_hi + x_lo * sin_hi
        out_lo_at = out_batch + head * stride_out_head + rows * stride_out_pos + pairs
        tl.store(out_lo_at, out_lo.to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(out_lo_at + half_dim, out_hi.to(out_ptr.dtype.element_ty), mask=mask)


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
def _plan(shape: tuple[int, int, int, int], x_strides: tuple[int, ...], stride_cos: int,
          stride_sin: int, x_dtype: torch.dtype, cos_dtype: torch.dtype, sin_dtype: torch.dtype,
          device: int) -> Launch:
    """The launch the tunables give for x of `shape` [B, H, S, D] and `x_strides`, out
    contiguous, cos/sin rows stride_cos/stride_sin apart. Cached by its arguments, which are plain
    values, so a call pays a dictionary lookup; `device` (the current CUDA device, -1 for CPU
    tensors) is part of the key because a compiled kernel is loaded on one device."""
    batch, n_heads, seq_len, head_dim = shape
    half_dim = head_dim // 2
    block_s = min(BLOCK_S, triton.next_power_of_2(seq_len))
    heads_per_program = min(HEADS_PER_PROGRAM, n_heads)
    grid = (triton.cdiv(seq_len, block_s), triton.cdiv(n_heads, heads_per_program), batch)
    if max(grid[1:]) > MAX_GRID_YZ:
        raise ValueError(f"grid {grid} exceeds {MAX_GRID_YZ} head groups or batch entries")
    out_strides = (n_heads * seq_len * head_dim, seq_len * head_dim, head_dim)
    return _compile(
        _rotary_kernel, grid, (x_dtype, cos_dtype, sin_dtype, x_dtype),
        (seq_len, n_heads, half_dim, *x_strides[:3], *out_strides, stride_cos, stride_sin,
         block_s, triton.next_power_of_2(half_dim), heads_per_program),
        num_warps=NUM_WARPS,
    )


def _table(t: torch.Tensor, seq_len: int, head_dim: int, name: str) -> torch.Tensor:
    if t.shape != (seq_len, head_dim):
        raise ValueError(f"{name} must be [S, D] = [{seq_len}, {head_dim}]; got {tuple(t.shape)}")
    return t if t.stride(-1) == 1 else t.contiguous()


def rotary_embedding(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    if x.ndim != 4:
        raise ValueError(f"x must be [B, H, S, D]; got {tuple(x.shape)}")
    shape = x.shape
    _, _, seq_len, head_dim = shape
    if head_dim % 2:
        raise ValueError(f"rotate-half needs an even head dim; got D={head_dim}")
    cos = _table(cos, seq_len, head_dim, "cos")
    sin = _table(sin, seq_len, head_dim, "sin")
    if x.stride(-1) != 1:
        x = x.contiguous()
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    device = torch.cuda.current_device() if x.is_cuda else -1
    pos = x.stride(2)
    packed = (shape[1] * shape[2] * pos, shape[2] * pos, pos, 1)
    launch = _plan(shape, packed, cos.stride(0), sin.stride(0), x.dtype, cos.dtype, sin.dtype,
                   device)
    _launch(launch, x, cos, sin, out)
    return out


def kernel_fn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return rotary_embedding(x, cos, sin)
