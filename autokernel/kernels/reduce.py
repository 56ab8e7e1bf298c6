"""Row-reduction starter: out[m] = sum over n of x[m, n], accumulated in float32, returned in x's
dtype; or their mean, or their max (`op`).

x may have any number of leading dims; they are flattened into rows (x[..., N] -> [M, N]).
`kernel_fn(x, axis)` reduces over dim `axis` instead (default -1, the last): x is viewed as
[outer, N, inner] and out[o, k] = sum over n of x[o, n, k].
`kernel_fn(x, axis, op)` picks the reduction: "sum" (the default), "mean" (the float32 sum
divided by N before the cast) or "amax" (the largest element; NaN when the row holds one, as
torch.amax). The op is a constexpr of both kernels: each op compiles its own code.

Algorithm
- One kernel, `_row_sums_kernel`: a program owns BLOCK_M rows and a contiguous range of columns.
  It walks the range in BLOCK_N chunks, adding each chunk into a [BLOCK_M, BLOCK_N] float32
  accumulator (lanes stay independent inside the loop, so no cross-warp traffic until the end),
  then reduces the accumulator along the columns and stores one value per row. For amax the
  accumulator holds running maxima (masked lanes load -inf) and a NaN flag per lane: Triton's
  maximum drops NaN, torch.amax returns it.
- VARIANT "row_loop": one program per BLOCK_M rows covers the whole row; the sum is written in
  x's dtype. Right when there are enough rows to fill the GPU.
- VARIANT "split_n": the columns are cut into splits of SPLIT_BLOCKS · BLOCK_N; stage 1 writes a
  float32 partial sum (max for amax) per (row, split), stage 2 runs the same kernel over the
  partials (one split, fixed order) and writes x's dtype; a mean divides by N in stage 2 only.
  Right for few, long rows (M = 1, N = 1 << 24), where row_loop would leave all but a handful of
  SMs idle. Both stages are deterministic: every partial has a fixed owner and order; there are
  no atomics.
- VARIANT "auto": split_n when fewer than AUTO_SPLIT_ROW_PROGRAMS row programs would run and a row
  spans more than one split, else row_loop.

Tunables
- BLOCK_M, BLOCK_N: the accumulator tile. Clamps: BLOCK_N <= next_pow2(N) (at least 16),
  BLOCK_M <= next_pow2(M), and BLOCK_M is halved until the tile holds at most MAX_TILE elements
  (a larger float32 tile only spills registers).
- NUM_WARPS: warps per program of stage 1 (and of row_loop).
- SPLIT_BLOCKS: BLOCK_N chunks per split in split_n (widened when a row would need more than
  MAX_SPLITS = 65535 splits, CUDA's grid limit on axis 1).
- VARIANT: "auto", "row_loop" or "split_n", as above.
- AXIS_BLOCK_R, AXIS_BLOCK_K, AXIS_NUM_WARPS: the axis kernel's [N step, inner block] tile and
  warps (clamped to next_pow2 of N and of inner).

Over a dim that is not the last (`_axis_sums_kernel`): a program owns AXIS_BLOCK_K adjacent
inner positions of one outer index and walks N in AXIS_BLOCK_R steps, so every load is AXIS_BLOCK_K
consecutive elements (coalesced along the inner dim, where the memory is contiguous), added into a
[AXIS_BLOCK_R, AXIS_BLOCK_K] float32 accumulator reduced over its rows at the end. The programs
are numbered along one grid axis (outer × inner blocks), which has no 65535 limit.

Host side: `_plan` turns shapes, strides, dtypes and the tunables into launches once per key
(lru_cache) and compiles them ahead (`warmup`); a call then only allocates the sums (and partials)
and launches the compiled kernel(s) through `CompiledKernel[grid]`, Triton's cheapest public launch
path.
"""

import functools
import math
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"

BLOCK_M = 1
BLOCK_N = 2048
NUM_WARPS = 8
SPLIT_BLOCKS = 8
VARIANT = "auto"
AXIS_BLOCK_R = 32
AXIS_BLOCK_K = 64
AXIS_NUM_WARPS = 4
TUNABLE_SPACE = {
    "BLOCK_M": [1, 2, 4, 8],
    "BLOCK_N": [256, 512, 1024, 2048, 4096],
    "NUM_WARPS": [2, 4, 8, 16],
    "SPLIT_BLOCKS": [1, 4, 8, 16, 32],
    "VARIANT": ["auto", "row_loop", "split_n"],
    "AXIS_BLOCK_R": [8, 16, 32, 64],
    "AXIS_BLOCK_K": [16, 32, 64, 128, 256],
    "AXIS_NUM_WARPS": [2, 4, 8],
}

MAX_TILE = 8192
# CUDA allows at most 65535 programs along grid axis 1, where the splits go.
MAX_SPLITS = 65535
# Fewer row programs than about two per SM of an H100/H200 (132 SMs) leaves the GPU idle.
AUTO_SPLIT_ROW_PROGRAMS = 256
# Stage 2 of split_n sums at most a few thousand partials per row: one fixed small tile.
PARTIALS_BLOCK_N = 1024
PARTIALS_NUM_WARPS = 4


@triton.jit
def _row_sums_kernel(
    x_ptr,
    out_ptr,
    n_rows,
    n_cols,
    stride_x_row,
    stride_out_row,
    cols_per_split,
    divisor,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    OP: tl.constexpr,
):
    """out[row, split] = OP of x[row, split·cols_per_split : (split+1)·cols_per_split] (a mean
    divides the sum by `divisor`, the row's full length)."""
    split = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_in_bounds = rows < n_rows
    row_starts = x_ptr + rows.to(tl.int64)[:, None] * stride_x_row
    col_begin = split * cols_per_split
    col_end = tl.minimum(col_begin + cols_per_split, n_cols)
    offsets = tl.arange(0, BLOCK_N)

    if OP == "amax":
        acc = tl.full([BLOCK_M, BLOCK_N], float("-inf"), dtype=tl.float32)
        nan_seen = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
        for start in range(col_begin, col_end, BLOCK_N):
            cols = start + offsets
            mask = row_in_bounds[:, None] & (cols < col_end)[None, :]
            values = tl.load(row_starts + cols[None, :], mask=mask,
                             other=float("-inf")).to(tl.float32)
            acc = tl.maximum(acc, values)
            nan_seen = nan_seen | (values != values).to(tl.int32)
        total = tl.max(acc, axis=1)
        total = tl.where(tl.max(nan_seen, axis=1) > 0, float("nan"), total)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(col_begin, col_end, BLOCK_N):
            cols = start + offsets
            mask = row_in_bounds[:, None] & (cols < col_end)[None, :]
            acc += tl.load(row_starts + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        total = tl.sum(acc, axis=1)
        if OP == "mean":
            total = total / divisor
    out_at = out_ptr + rows.to(tl.int64) * stride_out_row + split
    tl.store(out_at, total.to(out_ptr.dtype.element_ty), mask=row_in_bounds)


@triton.jit
def _axis_sums_kernel(
    x_ptr,
    out_ptr,
    n_reduced,
    n_inner,
    k_blocks,
    stride_x_outer,
    stride_x_reduced,
    stride_x_inner,
    BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,
    OP: tl.constexpr,
):
    """out[o, k] = OP over r of x[o, r, k], out contiguous [outer, n_inner]."""
    pid = tl.program_id(0)
    outer = pid // k_blocks
    ks = (pid % k_blocks) * BLOCK_K + tl.arange(0, BLOCK_K)
    k_in_bounds = ks < n_inner
    column_starts = (x_ptr + outer.to(tl.int64) * stride_x_outer
                     + ks.to(tl.int64)[None, :] * stride_x_inner)
    offsets = tl.arange(0, BLOCK_R)

    if OP == "amax":
        acc = tl.full([BLOCK_R, BLOCK_K], float("-inf"), dtype=tl.float32)
        nan_seen = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.int32)
        for start in range(0, n_reduced, BLOCK_R):
            rs = start + offsets
            mask = (rs < n_reduced)[:, None] & k_in_bounds[None, :]
            at = column_starts + rs.to(tl.int64)[:, None] * stride_x_reduced
            values = tl.load(at, mask=mask, other=float("-inf")).to(tl.float32)
            acc = tl.maximum(acc, values)
            nan_seen = nan_seen | (values != values).to(tl.int32)
        total = tl.max(acc, axis=0)
        total = tl.where(tl.max(nan_seen, axis=0) > 0, float("nan"), total)
    else:
        acc = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.float32)
        for start in range(0, n_reduced, BLOCK_R):
            rs = start + offsets
            mask = (rs < n_reduced)[:, None] & k_in_bounds[None, :]
            at = column_starts + rs.to(tl.int64)[:, None] * stride_x_reduced
            acc += tl.load(at, mask=mask, other=0.0).to(tl.float32)
        total = tl.sum(acc, axis=0)
        if OP == "mean":
            total = total / n_reduced
    out_at = out_ptr + outer.to(tl.int64) * n_inner + ks
    tl.store(out_at, total.to(out_ptr.dtype.element_ty), mask=k_in_bounds)


def _tile(n_rows: int, n_cols: int, block_m: int, block_n: int) -> tuple[int, int]:
    block_n = max(16, min(block_n, triton.next_power_of_2(n_cols)))
    block_m = max(1, min(block_m, triton.next_power_of_2(n_rows)))
    while block_m > 1 and block_m * block_n > MAX_TILE:
        block_m //= 2
    return block_m, block_n


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


def _row_sums_launch(n_rows: int, n_cols: int, stride_x_row: int, stride_out_row: int,
                     cols_per_split: int, divisor: int, block_m: int, block_n: int,
                     num_warps: int, x_dtype: torch.dtype, out_dtype: torch.dtype,
                     op: str) -> Launch:
    block_m, block_n = _tile(n_rows, n_cols, block_m, block_n)
    grid = (triton.cdiv(n_rows, block_m), triton.cdiv(n_cols, cols_per_split), 1)
    return _compile(_row_sums_kernel, grid, (x_dtype, out_dtype),
                    (n_rows, n_cols, stride_x_row, stride_out_row, cols_per_split, divisor,
                     block_m, block_n, op), num_warps=num_warps)


@functools.lru_cache(maxsize=1024)
def _plan(n_rows: int, n_cols: int, stride_row: int, dtype: torch.dtype, device: int,
          op: str = "sum") -> tuple[int, tuple[Launch, ...]]:
    """(splits, launches) the tunables give for x[n_rows, n_cols] (rows stride_row apart): for
    split_n, the float32 partials [n_rows, splits] to allocate and the launches of both stages;
    for row_loop, 0 and one launch. Cached by its arguments, which are plain values, so a call
    pays a dictionary lookup; `device` (the current CUDA device, -1 for CPU tensors) is part of
    the key because a compiled kernel is loaded on one device."""
    block_m, block_n = _tile(n_rows, n_cols, BLOCK_M, BLOCK_N)
    split_cols = SPLIT_BLOCKS * block_n
    if triton.cdiv(n_cols, split_cols) > MAX_SPLITS:  # widen splits, in whole blocks
        split_cols = triton.cdiv(triton.cdiv(n_cols, MAX_SPLITS), block_n) * block_n
    variant = VARIANT
    if variant == "auto":
        few_rows = triton.cdiv(n_rows, block_m) < AUTO_SPLIT_ROW_PROGRAMS
        variant = "split_n" if few_rows and n_cols > split_cols else "row_loop"

    if variant == "split_n":
        splits = triton.cdiv(n_cols, split_cols)
        # A mean's partials are sums: only stage 2, which sees the whole row, divides by N.
        partial_op = "sum" if op == "mean" else op
        return splits, (
            _row_sums_launch(n_rows, n_cols, stride_row, splits, split_cols, n_cols, block_m,
                             block_n, NUM_WARPS, dtype, torch.float32, partial_op),
            _row_sums_launch(n_rows, splits, splits, 1, splits, n_cols, 1, PARTIALS_BLOCK_N,
                             PARTIALS_NUM_WARPS, torch.float32, dtype, op),
        )
    return 0, (_row_sums_launch(n_rows, n_cols, stride_row, 1, n_cols, n_cols, block_m, block_n,
                                NUM_WARPS, dtype, dtype, op),)


def row_sums(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    if x.ndim == 0 or x.numel() == 0:
        raise ValueError(f"reduce needs a non-empty input of 1+ dims; got {tuple(x.shape)}")
    n_cols = x.shape[-1]
    rows = x if x.ndim == 2 else x.reshape(-1, n_cols)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    n_rows = rows.shape[0]
    out = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)  # one sum per row, in order
    device = torch.cuda.current_device() if x.is_cuda else -1
    splits, launches = _plan(n_rows, n_cols, rows.stride(0), x.dtype, device, op)
    if splits:
        partials = torch.empty((n_rows, splits), dtype=torch.float32, device=x.device)
        _launch(launches[0], rows, partials)
        _launch(launches[1], partials, out)
    else:
        _launch(launches[0], rows, out)
    return out


@functools.lru_cache(maxsize=1024)
def _axis_plan(n_outer: int, n_reduced: int, n_inner: int, strides: tuple[int, int, int],
               dtype: torch.dtype, device: int, op: str = "sum") -> Launch:
    """The launch reducing x[n_outer, n_reduced, n_inner] (those strides) over its dim 1."""
    block_k = max(2, min(AXIS_BLOCK_K, triton.next_power_of_2(n_inner)))
    block_r = max(2, min(AXIS_BLOCK_R, triton.next_power_of_2(n_reduced)))
    k_blocks = triton.cdiv(n_inner, block_k)
    grid = (n_outer * k_blocks, 1, 1)
    return _compile(_axis_sums_kernel, grid, (dtype, dtype),
                    (n_reduced, n_inner, k_blocks, *strides, block_r, block_k, op),
                    num_warps=AXIS_NUM_WARPS)


def axis_sums(x: torch.Tensor, axis: int, op: str = "sum") -> torch.Tensor:
    """x reduced over dim `axis` (non-negative, not the last)."""
    shape = x.shape
    n_outer, n_reduced = math.prod(shape[:axis]), shape[axis]
    n_inner = math.prod(shape[axis + 1:])
    view = x.reshape(n_outer, n_reduced, n_inner)  # a view unless x's strides forbid one
    out = torch.empty(shape[:axis] + shape[axis + 1:], dtype=x.dtype, device=x.device)
    device = torch.cuda.current_device() if x.is_cuda else -1
    launch = _axis_plan(n_outer, n_reduced, n_inner, tuple(view.stride()), x.dtype, device, op)
    _launch(launch, view, out)
    return out


OPS = ("sum", "mean", "amax")


def kernel_fn(x: torch.Tensor, axis: int = -1, op: str = "sum") -> torch.Tensor:
    if x.ndim == 0 or x.numel() == 0:
        raise ValueError(f"reduce needs a non-empty input of 1+ dims; got {tuple(x.shape)}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} out of range for {x.ndim} dims")
    if op not in OPS:
        raise ValueError(f"op {op!r} is not one of {', '.join(OPS)}")
    axis %= x.ndim
    return row_sums(x, op) if axis == x.ndim - 1 else axis_sums(x, axis, op)
