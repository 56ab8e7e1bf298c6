"""WRONG (layout gap: the outer stride of a softmax over a dim that is not the last).

The softmax starter, except that over dim 1 of x[outer, N, inner] it takes the outer stride to be
N * stride(1) (packed) instead of x's own: right for a contiguous x and for the layouts that
only pad or swap the last two dims, wrong for a channel slice x[:, :C] of an NCHW tensor, whose
[outer, N, inner] view is what the softmax route hands kernel_fn.
"""


import functools
import math
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"

VARIANT = "single_pass"
ROWS_PER_PROGRAM = 1
BLOCK_N = 4096
SINGLE_PASS_MAX_N = 16384
NUM_WARPS = 8
NUM_STAGES = 2
MIN_TILE_ELEMENTS = 512
# Over a dim that is not the last (kernel_fn(x, axis), x viewed as [outer, N, inner]):
# `softmax_axis_kernel`, a program per AXIS_BLOCK_K adjacent inner positions of one outer index
# (loads coalesced along the contiguous inner dim), three walks over N in AXIS_BLOCK_R steps: the
# max, the sum of exp(x - max), then y. Correct for any N; x is read three times.
AXIS_BLOCK_R = 16
AXIS_BLOCK_K = 64
AXIS_NUM_WARPS = 4

TUNABLE_SPACE = {
    "VARIANT": ["single_pass", "online"],
    "ROWS_PER_PROGRAM": [1, 2, 4, 8, 16],
    "BLOCK_N": [512, 1024, 2048, 4096, 8192],
    "SINGLE_PASS_MAX_N": [4096, 8192, 16384, 32768, 65536],
    "NUM_WARPS": [1, 2, 4, 8, 16, 32],
    "NUM_STAGES": [1, 2, 3, 4],
    "MIN_TILE_ELEMENTS": [1, 256, 512, 1024, 2048],
    "AXIS_BLOCK_R": [4, 8, 16, 32],
    "AXIS_BLOCK_K": [16, 32, 64, 128, 256],
    "AXIS_NUM_WARPS": [2, 4, 8],
}

# Shared memory the "online" loops' software pipeline may take: each stage past the first buffers a
# chunk of x there, and Hopper gives a block at most 227 KiB.
PIPELINE_SHARED_BYTES = 160 * 1024


@triton.jit
def _row_offsets(pid, n_rows, stride_row, BLOCK_M: tl.constexpr):
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_in_range = rows < n_rows
    # Rows past the end re-read the last row (stores are masked): dead lanes then see real,
    # finite data and never produce NaN from an all -inf row.
    rows = tl.minimum(rows, n_rows - 1)
    return rows.to(tl.int64) * stride_row, row_in_range


@triton.jit
def softmax_single_pass_kernel(
    x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    x_rows, row_in_range = _row_offsets(tl.program_id(0), n_rows, stride_x, BLOCK_M)
    y_rows, _ = _row_offsets(tl.program_id(0), n_rows, stride_y, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_in_range = cols < n_cols

    x = tl.load(x_ptr + x_rows[:, None] + cols[None, :], mask=col_in_range[None, :],
                other=float("-inf")).to(tl.float32)
    row_max = tl.max(x, axis=1)
    numerator = tl.exp(x - row_max[:, None])
    inv_denominator = 1.0 / tl.sum(numerator, axis=1)
    y = numerator * inv_denominator[:, None]
    tl.store(y_ptr + y_rows[:, None] + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_in_range[:, None] & col_in_range[None, :])


@triton.jit
def softmax_online_kernel(
    x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    x_rows, row_in_range = _row_offsets(tl.program_id(0), n_rows, stride_x, BLOCK_M)
    y_rows, _ = _row_offsets(tl.program_id(0), n_rows, stride_y, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)

    running_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    running_sum = tl.zeros([BLOCK_M], tl.float32)
    for start in tl.range(0, n_cols, BLOCK_N, num_stages=NUM_STAGES):
        col_in_range = start + cols < n_cols
        x = tl.load(x_ptr + x_rows[:, None] + (start + cols)[None, :],
                    mask=col_in_range[None, :], other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(running_max, tl.max(x, axis=1))
        # While a row has seen only -inf, its max is -inf and x - max would be -inf - -inf = NaN;
        # shifting by 0 instead gives the right answer (every exp is 0).
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        running_sum = running_sum * tl.exp(running_max - shift) + tl.sum(
            tl.exp(x - shift[:, None]), axis=1)
        running_max = new_max

    inv_sum = 1.0 / running_sum
    for start in tl.range(0, n_cols, BLOCK_N, num_stages=NUM_STAGES):
        col_in_range = start + cols < n_cols
        x = tl.load(x_ptr + x_rows[:, None] + (start + cols)[None, :],
                    mask=col_in_range[None, :], other=float("-inf")).to(tl.float32)
        y = tl.exp(x - running_max[:, None]) * inv_sum[:, None]
        tl.store(y_ptr + y_rows[:, None] + (start + cols)[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_in_range[:, None] & col_in_range[None, :])


@triton.jit
def softmax_axis_kernel(
    x_ptr, y_ptr, n_reduced, n_inner, k_blocks, stride_x_outer, stride_x_reduced, stride_x_inner,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """y[o, :, k] = softmax(x[o, :, k]); y contiguous."""
    pid = tl.program_id(0)
    outer = (pid // k_blocks).to(tl.int64)
    ks = (pid % k_blocks) * BLOCK_K + tl.arange(0, BLOCK_K)
    k_in_range = ks < n_inner
    x_columns = x_ptr + outer * stride_x_outer + ks.to(tl.int64)[None, :] * stride_x_inner
    y_columns = y_ptr + outer * n_reduced * n_inner + ks.to(tl.int64)[None, :]
    offsets = tl.arange(0, BLOCK_R)

    running_max = tl.full([BLOCK_R, BLOCK_K], float("-inf"), tl.float32)
    for start in range(0, n_reduced, BLOCK_R):
        rs = start + offsets
        mask = (rs < n_reduced)[:, None] & k_in_range[None, :]
        x = tl.load(x_columns + rs.to(tl.int64)[:, None] * stride_x_reduced, mask=mask,
                    other=float("-inf")).to(tl.float32)
        running_max = tl.maximum(running_max, x)
    column_max = tl.max(running_max, axis=0)
    # Dead lanes (past n_inner) see only -inf: 0 keeps their exp finite; their stores are masked.
    column_max = tl.where(k_in_range, column_max, 0.0)

    running_sum = tl.zeros([BLOCK_R, BLOCK_K], tl.float32)
    for start in range(0, n_reduced, BLOCK_R):
        rs = start + offsets
        mask = (rs < n_reduced)[:, None] & k_in_range[None, :]
        x = tl.load(x_columns + rs.to(tl.int64)[:, None] * stride_x_reduced, mask=mask,
                    other=float("-inf")).to(tl.float32)
        running_sum += tl.exp(x - column_max[None, :])
    inverse_sum = 1.0 / tl.sum(running_sum, axis=0)

    for start in range(0, n_reduced, BLOCK_R):
        rs = start + offsets
        mask = (rs < n_reduced)[:, None] & k_in_range[None, :]
        x = tl.load(x_columns + rs.to(tl.int64)[:, None] * stride_x_reduced, mask=mask,
                    other=float("-inf")).to(tl.float32)
        y = tl.exp(x - column_max[None, :]) * inverse_sum[None, :]
        tl.store(y_columns + rs.to(tl.int64)[:, None] * n_inner, y.to(y_ptr.dtype.element_ty),
                 mask=mask)


def _num_warps(tile_elements: int, requested: int) -> int:
    """`requested`, clamped so each thread holds 8 to 128 tile elements, and to 1..32 warps."""
    fewest = tile_elements // (32 * 128)
    most = tile_elements // (32 * 8)
    return max(1, min(32, max(fewest, min(requested, most))))


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
def _plan(n_rows: int, n_cols: int, stride_x: int, dtype: torch.dtype, device: int) -> Launch:
    """The launch the tunables give for x[n_rows, n_cols] (rows stride_x apart), y contiguous:
    the one place where tunables become a launch. Cached by its arguments, which are plain
    values, so a call pays a dictionary lookup; `device` (the current CUDA device, -1 for CPU
    tensors) is part of the key because a compiled kernel is loaded on one device."""
    row_block = triton.next_power_of_2(n_cols)
    if VARIANT == "single_pass" and row_block <= SINGLE_PASS_MAX_N:
        rows = max(ROWS_PER_PROGRAM, MIN_TILE_ELEMENTS // row_block)
        rows, block_n = min(rows, max(1, SINGLE_PASS_MAX_N // row_block)), row_block
        kernel, constexprs = softmax_single_pass_kernel, (rows, block_n)
    else:
        rows, block_n = ROWS_PER_PROGRAM, min(BLOCK_N, row_block)
        stage_bytes = rows * block_n * dtype.itemsize
        stages = max(1, min(NUM_STAGES, 1 + PIPELINE_SHARED_BYTES // stage_bytes))
        kernel, constexprs = softmax_online_kernel, (rows, block_n, stages)
    return _compile(kernel, (triton.cdiv(n_rows, rows), 1, 1), (dtype, dtype),
                    (n_rows, n_cols, stride_x, n_cols, *constexprs),
                    num_warps=_num_warps(rows * block_n, NUM_WARPS))


def softmax(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if y.numel() == 0:
        return y
    n_cols = x.shape[-1]
    x2d = x if x.ndim == 2 else x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    device = torch.cuda.current_device() if x.is_cuda else -1
    _launch(_plan(x2d.shape[0], n_cols, x2d.stride(0), x.dtype, device), x2d, y)
    return y


@functools.lru_cache(maxsize=1024)
def _axis_plan(n_outer: int, n_reduced: int, n_inner: int, strides: tuple[int, int, int],
               dtype: torch.dtype, device: int) -> Launch:
    """The launch taking softmax over dim 1 of x[n_outer, n_reduced, n_inner] (those strides)."""
    block_k = max(2, min(AXIS_BLOCK_K, triton.next_power_of_2(n_inner)))
    block_r = max(2, min(AXIS_BLOCK_R, triton.next_power_of_2(n_reduced)))
    k_blocks = triton.cdiv(n_inner, block_k)
    return _compile(softmax_axis_kernel, (n_outer * k_blocks, 1, 1), (dtype, dtype),
                    (n_reduced, n_inner, k_blocks, *strides, block_r, block_k),
                    num_warps=AXIS_NUM_WARPS)


def softmax_over_axis(x: torch.Tensor, axis: int) -> torch.Tensor:
    """Softmax over dim `axis` (non-negative, not the last)."""
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if y.numel() == 0:
        return y
    shape = x.shape
    n_outer, n_reduced = math.prod(shape[:axis]), shape[axis]
    n_inner = math.prod(shape[axis + 1:])
    view = x.reshape(n_outer, n_reduced, n_inner)  # a view unless x's strides forbid one
    device = torch.cuda.current_device() if x.is_cuda else -1
    packed = (n_reduced * view.stride(1), view.stride(1), view.stride(2))
    _launch(_axis_plan(n_outer, n_reduced, n_inner, packed, x.dtype, device), view, y)
    return y


def kernel_fn(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} out of range for {x.ndim} dims")
    axis %= x.ndim
    return softmax(x) if axis == x.ndim - 1 else softmax_over_axis(x, axis)
