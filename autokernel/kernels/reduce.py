"""Row-sum starter: out[m] = sum over n of x[m, n], accumulated in float32, returned in x's dtype.

x may have any number of leading dims; they are flattened into rows (x[..., N] -> [M, N]).

Algorithm
- One kernel, `_row_sums_kernel`: a program owns BLOCK_M rows and a contiguous range of columns.
  It walks the range in BLOCK_N chunks, adding each chunk into a [BLOCK_M, BLOCK_N] float32
  accumulator (lanes stay independent inside the loop, so no cross-warp traffic until the end),
  then reduces the accumulator along the columns and stores one value per row.
- VARIANT "row_loop": one program per BLOCK_M rows covers the whole row; the sum is written in
  x's dtype. Right when there are enough rows to fill the GPU.
- VARIANT "split_n": the columns are cut into splits of SPLIT_BLOCKS · BLOCK_N; stage 1 writes a
  float32 partial sum per (row, split), stage 2 runs the same kernel over the partials (one
  split, fixed order) and writes x's dtype. Right for few, long rows (M = 1, N = 1 << 24), where
  row_loop would leave all but a handful of SMs idle. Both stages are deterministic: every
  partial has a fixed owner and order; there are no atomics.
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
"""

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
TUNABLE_SPACE = {
    "BLOCK_M": [1, 2, 4, 8],
    "BLOCK_N": [256, 512, 1024, 2048, 4096],
    "NUM_WARPS": [2, 4, 8, 16],
    "SPLIT_BLOCKS": [1, 4, 8, 16, 32],
    "VARIANT": ["auto", "row_loop", "split_n"],
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
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """out[row, split] = sum of x[row, split·cols_per_split : (split+1)·cols_per_split]."""
    split = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_in_bounds = rows < n_rows
    row_starts = x_ptr + rows.to(tl.int64)[:, None] * stride_x_row
    col_begin = split * cols_per_split
    col_end = tl.minimum(col_begin + cols_per_split, n_cols)
    offsets = tl.arange(0, BLOCK_N)

    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(col_begin, col_end, BLOCK_N):
        cols = start + offsets
        mask = row_in_bounds[:, None] & (cols < col_end)[None, :]
        acc += tl.load(row_starts + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=1)
    out_at = out_ptr + rows.to(tl.int64) * stride_out_row + split
    tl.store(out_at, total.to(out_ptr.dtype.element_ty), mask=row_in_bounds)


def _tile(n_rows: int, n_cols: int, block_m: int, block_n: int) -> tuple[int, int]:
    block_n = max(16, min(block_n, triton.next_power_of_2(n_cols)))
    block_m = max(1, min(block_m, triton.next_power_of_2(n_rows)))
    while block_m > 1 and block_m * block_n > MAX_TILE:
        block_m //= 2
    return block_m, block_n


def _launch(x: torch.Tensor, out: torch.Tensor, cols_per_split: int, block_m: int, block_n: int,
            num_warps: int) -> None:
    n_rows, n_cols = x.shape
    block_m, block_n = _tile(n_rows, n_cols, block_m, block_n)
    n_splits = triton.cdiv(n_cols, cols_per_split)
    grid = (triton.cdiv(n_rows, block_m), n_splits)
    _row_sums_kernel[grid](
        x, out, n_rows, n_cols, x.stride(0), out.stride(0), cols_per_split,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps,
    )


def row_sums(x: torch.Tensor) -> torch.Tensor:
    if x.ndim == 0 or x.numel() == 0:
        raise ValueError(f"reduce needs a non-empty input of 1+ dims; got {tuple(x.shape)}")
    n_cols = x.shape[-1]
    rows = x.reshape(-1, n_cols)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    n_rows = rows.shape[0]
    out = torch.empty(n_rows, dtype=x.dtype, device=x.device)

    block_m, block_n = _tile(n_rows, n_cols, BLOCK_M, BLOCK_N)
    split_cols = SPLIT_BLOCKS * block_n
    if triton.cdiv(n_cols, split_cols) > MAX_SPLITS:  # widen splits, in whole blocks
        split_cols = triton.cdiv(triton.cdiv(n_cols, MAX_SPLITS), block_n) * block_n
    variant = VARIANT
    if variant == "auto":
        few_rows = triton.cdiv(n_rows, block_m) < AUTO_SPLIT_ROW_PROGRAMS
        variant = "split_n" if few_rows and n_cols > split_cols else "row_loop"

    if variant == "split_n":
        partials = torch.empty((n_rows, triton.cdiv(n_cols, split_cols)), dtype=torch.float32,
                               device=x.device)
        _launch(rows, partials, split_cols, block_m, block_n, NUM_WARPS)
        _launch(partials, out[:, None], partials.shape[1], 1, PARTIALS_BLOCK_N,
                PARTIALS_NUM_WARPS)
    else:
        _launch(rows, out[:, None], n_cols, block_m, block_n, NUM_WARPS)
    return out.reshape(x.shape[:-1])


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    return row_sums(x)
