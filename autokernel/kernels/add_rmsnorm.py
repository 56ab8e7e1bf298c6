"""Residual add + RMSNorm over the last dimension of x[M, N], in Triton, with two outputs.

    h[m, :] = x[m, :] + residual[m, :]
    y[m, :] = h[m, :] / sqrt(mean(h[m, :]²) + eps) * weight

kernel_fn returns (y, h). Each program owns a tile of ROWS_PER_PROGRAM rows and reads x and
residual once. The sum is taken in float32 and rounded to x's dtype once, when h is stored; the
norm is computed from that rounded h (what an unfused model normalizes), squared and summed in
float32 whatever the dtype (in fp16, h² overflows above 256), and y is rounded once, at its store.
Two implementations (VARIANT):

- "single_pass": the whole row sits in registers (a [rows, next_pow2(N)] tile): x and residual
  read once, h and y written once. Only for rows of at most SINGLE_PASS_MAX_N columns; longer
  rows fall back to "two_pass", so every tunable combination is correct at every N.
- "two_pass": the row is walked in BLOCK_N-column chunks twice: the first walk reads x and
  residual, stores h and accumulates h² element-wise; the second reads x and residual again
  (usually from L2) and writes y. Works for any N.

Tunables:
- VARIANT: "single_pass" or "two_pass", as above.
- ROWS_PER_PROGRAM: rows per program (short rows need several to keep the memory system busy).
  In "single_pass" the launcher lowers it until the tile holds at most SINGLE_PASS_MAX_N elements.
- BLOCK_N: chunk width of the "two_pass" walk (clamped to next_pow2(N)).
- SINGLE_PASS_MAX_N: longest row (after rounding up to a power of two) kept in registers.
- NUM_WARPS: warps per program, clamped so each thread holds 8 to 128 tile elements (1..32).

Host side: `_plan` turns shapes, strides, dtypes and the tunables into a launch once per key
(lru_cache) and compiles it ahead (`warmup`); a call then only allocates y and h and launches the
compiled kernel through `CompiledKernel[grid]`, Triton's cheapest public launch path.
"""

import functools
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "add_rmsnorm"
BACKEND = "triton"

VARIANT = "single_pass"
ROWS_PER_PROGRAM = 1
BLOCK_N = 4096
SINGLE_PASS_MAX_N = 16384
NUM_WARPS = 8

TUNABLE_SPACE = {
    "VARIANT": ["single_pass", "two_pass"],
    "ROWS_PER_PROGRAM": [1, 2, 4, 8, 16],
    "BLOCK_N": [512, 1024, 2048, 4096, 8192],
    "SINGLE_PASS_MAX_N": [4096, 8192, 16384, 32768],
    "NUM_WARPS": [1, 2, 4, 8, 16, 32],
}


@triton.jit
def _row_offsets(pid, n_rows, stride_row, BLOCK_M: tl.constexpr):
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_in_range = rows < n_rows
    # Rows past the end re-read the last row (stores are masked), so dead lanes stay finite.
    rows = tl.minimum(rows, n_rows - 1)
    return rows.to(tl.int64) * stride_row, row_in_range


@triton.jit
def add_rmsnorm_single_pass_kernel(
    x_ptr, residual_ptr, weight_ptr, y_ptr, h_ptr, n_rows, n_cols, stride_x, stride_residual,
    eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    x_rows, row_in_range = _row_offsets(pid, n_rows, stride_x, BLOCK_M)
    residual_rows, _ = _row_offsets(pid, n_rows, stride_residual, BLOCK_M)
    out_rows, _ = _row_offsets(pid, n_rows, n_cols, BLOCK_M)  # y and h are contiguous
    cols = tl.arange(0, BLOCK_N)
    col_in_range = cols < n_cols
    store_mask = row_in_range[:, None] & col_in_range[None, :]

    x = tl.load(x_ptr + x_rows[:, None] + cols[None, :], mask=col_in_range[None, :], other=0.0)
    residual = tl.load(residual_ptr + residual_rows[:, None] + cols[None, :],
                       mask=col_in_range[None, :], other=0.0)
    h = (x.to(tl.float32) + residual.to(tl.float32)).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + out_rows[:, None] + cols[None, :], h, mask=store_mask)

    h = h.to(tl.float32)
    # tl.cast: under torch.compile Inductor passes a Python float as fp64
    rstd = tl.rsqrt(tl.sum(h * h, axis=1) / n_cols + tl.cast(eps, tl.float32))
    weight = tl.load(weight_ptr + cols, mask=col_in_range, other=0.0).to(tl.float32)
    y = h * rstd[:, None] * weight[None, :]
    tl.store(y_ptr + out_rows[:, None] + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=store_mask)


@triton.jit
def add_rmsnorm_two_pass_kernel(
    x_ptr, residual_ptr, weight_ptr, y_ptr, h_ptr, n_rows, n_cols, stride_x, stride_residual,
    eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    x_rows, row_in_range = _row_offsets(pid, n_rows, stride_x, BLOCK_M)
    residual_rows, _ = _row_offsets(pid, n_rows, stride_residual, BLOCK_M)
    out_rows, _ = _row_offsets(pid, n_rows, n_cols, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)

    sum_sq = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        col_in_range = start + cols < n_cols
        x = tl.load(x_ptr + x_rows[:, None] + (start + cols)[None, :],
                    mask=col_in_range[None, :], other=0.0)
        residual = tl.load(residual_ptr + residual_rows[:, None] + (start + cols)[None, :],
                           mask=col_in_range[None, :], other=0.0)
        h = (x.to(tl.float32) + residual.to(tl.float32)).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + out_rows[:, None] + (start + cols)[None, :], h,
                 mask=row_in_range[:, None] & col_in_range[None, :])
        h = h.to(tl.float32)
        sum_sq += h * h
    rstd = tl.rsqrt(tl.sum(sum_sq, axis=1) / n_cols + tl.cast(eps, tl.float32))

    for start in range(0, n_cols, BLOCK_N):
        col_in_range = start + cols < n_cols
        mask = row_in_range[:, None] & col_in_range[None, :]
        # h again from x and residual (usually L2 hits), rounded as it was stored.
        x = tl.load(x_ptr + x_rows[:, None] + (start + cols)[None, :],
                    mask=col_in_range[None, :], other=0.0)
        residual = tl.load(residual_ptr + residual_rows[:, None] + (start + cols)[None, :],
                           mask=col_in_range[None, :], other=0.0)
        h = (x.to(tl.float32) + residual.to(tl.float32)).to(h_ptr.dtype.element_ty)
        weight = tl.load(weight_ptr + start + cols, mask=col_in_range, other=0.0).to(tl.float32)
        y = h.to(tl.float32) * rstd[:, None] * weight[None, :]
        tl.store(y_ptr + out_rows[:, None] + (start + cols)[None, :],
                 y.to(y_ptr.dtype.element_ty), mask=mask)


def _num_warps(tile_elements: int, requested: int) -> int:
    """`requested`, clamped so each thread holds 8 to 128 tile elements, and to 1..32 warps."""
    fewest = tile_elements // (32 * 128)
    most = tile_elements // (32 * 8)
    return max(1, min(32, max(fewest, min(requested, most))))


class Launch(NamedTuple):
    """A planned launch: the kernel, its grid, every argument after the leading tensors, its
    options, and the kernel compiled for them (None under the interpreter)."""

    kernel: Any
    grid: tuple[int, int, int]
    args: tuple[Any, ...]
    options: dict[str, int]
    compiled: Any


def _compile(kernel: Any, grid: tuple[int, int, int], tensor_dtypes: tuple[torch.dtype, ...],
             args: tuple[Any, ...], **options: int) -> Launch:
    """Compile `kernel` ahead for tensors of `tensor_dtypes` followed by `args` (warming up with
    dtypes in place of tensors compiles the 16-byte-aligned pointer variant). The interpreter's
    warm-up compiles nothing (None)."""
    warmup = getattr(kernel, "warmup", None)
    compiled = None if warmup is None else warmup(*tensor_dtypes, *args, grid=grid, **options)
    return Launch(kernel, grid, args, options, compiled)


def _launch(launch: Launch, *tensors: torch.Tensor) -> None:
    """Straight through the compiled kernel when every pointer is 16-byte aligned, as it was
    compiled for; a view at an odd offset goes through Triton's JIT, which specializes on it."""
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
def _plan(n_rows: int, n_cols: int, stride_x: int, stride_residual: int, eps: float,
          x_dtype: torch.dtype, weight_dtype: torch.dtype, device: int) -> Launch:
    """The launch the tunables give for rows of n_cols (x's and residual's rows those strides
    apart), y and h contiguous: the one place where tunables become a launch. `device` (the
    current CUDA device, -1 for CPU tensors) keys it because a compiled kernel is per device."""
    row_block = triton.next_power_of_2(n_cols)
    if VARIANT == "single_pass" and row_block <= SINGLE_PASS_MAX_N:
        rows = min(ROWS_PER_PROGRAM, max(1, SINGLE_PASS_MAX_N // row_block))
        kernel, block_n = add_rmsnorm_single_pass_kernel, row_block
    else:
        rows, block_n = ROWS_PER_PROGRAM, min(BLOCK_N, row_block)
        kernel = add_rmsnorm_two_pass_kernel
    return _compile(kernel, (triton.cdiv(n_rows, rows), 1, 1),
                    (x_dtype, x_dtype, weight_dtype, x_dtype, x_dtype),
                    (n_rows, n_cols, stride_x, stride_residual, eps, rows, block_n),
                    num_warps=_num_warps(rows * block_n, NUM_WARPS))


def _rows(t: torch.Tensor, n_cols: int) -> torch.Tensor:
    """t as [rows, n_cols] with unit column stride (a view where its strides allow one)."""
    t2d = t if t.ndim == 2 else t.reshape(-1, n_cols)
    return t2d if t2d.stride(-1) == 1 else t2d.contiguous()


def kernel_fn(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
              eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    if x.shape != residual.shape or x.dtype != residual.dtype or x.ndim == 0:
        raise ValueError(f"x {list(x.shape)} {x.dtype} and residual {list(residual.shape)} "
                         f"{residual.dtype} must match")
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    h = torch.empty_like(x, memory_format=torch.contiguous_format)
    if y.numel() == 0:
        return y, h
    n_cols = x.shape[-1]
    x2d, residual2d = _rows(x, n_cols), _rows(residual, n_cols)
    device = torch.cuda.current_device() if x.is_cuda else -1
    launch = _plan(x2d.shape[0], n_cols, x2d.stride(0), residual2d.stride(0), float(eps),
                   x.dtype, weight.dtype, device)
    _launch(launch, x2d, residual2d, weight.contiguous(), y, h)
    return y, h
