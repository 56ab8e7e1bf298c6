"""LayerNorm over the last dimension of x[M, N] with affine weight and bias, in Triton.

    y[m, :] = (x[m, :] - mean) / sqrt(var + eps) * weight + bias      (biased variance)

Each program owns a tile of ROWS_PER_PROGRAM rows; statistics are computed in float32 on values
shifted by the row's first element (x - x[m, 0]). The shift keeps the numbers small when the row
has a large mean (1e4 + noise), so the variance never comes from subtracting two huge numbers,
and a constant row gives exactly zero deviations (y = bias), whatever its level.

Two implementations (VARIANT):

- "single_pass": the whole row sits in registers (a [rows, next_pow2(N)] tile): mean, then the
  variance of the deviations from it (exact two-pass, no reload), then y. One read of x. Only for
  rows of at most SINGLE_PASS_MAX_N columns; longer rows fall back to "welford".
- "welford": the row is walked in BLOCK_N-column chunks twice. The first walk computes each
  chunk's mean and sum of squared deviations and merges them into the running ones (Chan et al.'s
  parallel-variance update, which stays exact where E[x²] - E[x]² would cancel); the second walk
  writes y. x is read twice, y written once. Works for any N.

Tunables:
- VARIANT: "single_pass" or "welford", as above.
- ROWS_PER_PROGRAM: rows per program (short rows need several to keep the memory system busy).
  In "single_pass" the launcher lowers it until the tile holds at most SINGLE_PASS_MAX_N elements.
- BLOCK_N: chunk width of the "welford" walk (clamped to next_pow2(N)); "single_pass" ignores it.
- SINGLE_PASS_MAX_N: longest row (after rounding up to a power of two) kept in registers.
- NUM_WARPS: warps per program. The launcher clamps it so each thread holds between 8 and 128
  tile elements (fewer warps for tiny tiles, more for huge ones), between 1 and 32 warps.
- NUM_STAGES: software-pipelining depth of the "welford" loops; the launcher lowers it so the
  pipeline's buffers fit in PIPELINE_SHARED_BYTES of shared memory.

Host side: `_plan` turns shapes, strides, dtypes and the tunables into launches once per key
(lru_cache) and compiles them ahead (`warmup`); a call then only allocates y and launches the
compiled kernel through `CompiledKernel[grid]`, Triton's cheapest public launch path.
"""

import functools
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "layernorm"
BACKEND = "triton"

VARIANT = "single_pass"
ROWS_PER_PROGRAM = 1
BLOCK_N = 4096
SINGLE_PASS_MAX_N = 16384
NUM_WARPS = 8
NUM_STAGES = 2

TUNABLE_SPACE = {
    "VARIANT": ["single_pass", "welford"],
    "ROWS_PER_PROGRAM": [1, 2, 4, 8, 16],
    "BLOCK_N": [512, 1024, 2048, 4096, 8192],
    "SINGLE_PASS_MAX_N": [4096, 8192, 16384, 32768, 65536],
    "NUM_WARPS": [1, 2, 4, 8, 16, 32],
    "NUM_STAGES": [1, 2, 3, 4],
}

# Shared memory the "welford" loops' software pipeline may take: each stage past the first buffers a
# chunk of x (and weight and bias) there, and Hopper gives a block at most 227 KiB.
PIPELINE_SHARED_BYTES = 160 * 1024


@triton.jit
def _row_offsets(pid, n_rows, stride_row, BLOCK_M: tl.constexpr):
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_in_range = rows < n_rows
    # Rows past the end re-read the last row (stores are masked), so dead lanes stay finite.
    rows = tl.minimum(rows, n_rows - 1)
    return rows.to(tl.int64) * stride_row, row_in_range


@triton.jit
def layernorm_single_pass_kernel(
    x_ptr, weight_ptr, bias_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    x_rows, row_in_range = _row_offsets(tl.program_id(0), n_rows, stride_x, BLOCK_M)
    y_rows, _ = _row_offsets(tl.program_id(0), n_rows, stride_y, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_in_range = cols < n_cols

    pivot = tl.load(x_ptr + x_rows).to(tl.float32)
    x = tl.load(x_ptr + x_rows[:, None] + cols[None, :], mask=col_in_range[None, :],
                other=0.0).to(tl.float32)
    shifted = tl.where(col_in_range[None, :], x - pivot[:, None], 0.0)
    mean = tl.sum(shifted, axis=1) / n_cols
    centered = tl.where(col_in_range[None, :], shifted - mean[:, None], 0.0)
    # tl.cast: under torch.compile Inductor passes a Python float as fp64
    rstd = tl.rsqrt(tl.sum(centered * centered, axis=1) / n_cols + tl.cast(eps, tl.float32))

    weight = tl.load(weight_ptr + cols, mask=col_in_range, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=col_in_range, other=0.0).to(tl.float32)
    y = centered * rstd[:, None] * weight[None, :] + bias[None, :]
    tl.store(y_ptr + y_rows[:, None] + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_in_range[:, None] & col_in_range[None, :])


@triton.jit
def layernorm_welford_kernel(
    x_ptr, weight_ptr, bias_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    x_rows, row_in_range = _row_offsets(tl.program_id(0), n_rows, stride_x, BLOCK_M)
    y_rows, _ = _row_offsets(tl.program_id(0), n_rows, stride_y, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    pivot = tl.load(x_ptr + x_rows).to(tl.float32)

    mean = tl.zeros([BLOCK_M], tl.float32)
    sum_sq_dev = tl.zeros([BLOCK_M], tl.float32)
    for start in tl.range(0, n_cols, BLOCK_N, num_stages=NUM_STAGES):
        col_in_range = start + cols < n_cols
        x = tl.load(x_ptr + x_rows[:, None] + (start + cols)[None, :],
                    mask=col_in_range[None, :], other=0.0).to(tl.float32)
        shifted = tl.where(col_in_range[None, :], x - pivot[:, None], 0.0)
        total = tl.minimum(n_cols, start + BLOCK_N).to(tl.float32)
        chunk_count = tl.minimum(n_cols - start, BLOCK_N).to(tl.float32)
        seen = total - chunk_count
        chunk_mean = tl.sum(shifted, axis=1) / chunk_count
        centered = tl.where(col_in_range[None, :], shifted - chunk_mean[:, None], 0.0)
        chunk_sum_sq_dev = tl.sum(centered * centered, axis=1)
        # Chan et al.: merge (seen, mean, sum_sq_dev) with the chunk's (count, mean, sum_sq_dev).
        delta = chunk_mean - mean
        mean += delta * (chunk_count / total)
        sum_sq_dev += chunk_sum_sq_dev + delta * delta * (seen * chunk_count / total)
    rstd = tl.rsqrt(sum_sq_dev / n_cols + tl.cast(eps, tl.float32))

    for start in tl.range(0, n_cols, BLOCK_N, num_stages=NUM_STAGES):
        col_in_range = start + cols < n_cols
        x = tl.load(x_ptr + x_rows[:, None] + (start + cols)[None, :],
                    mask=col_in_range[None, :], other=0.0).to(tl.float32)
        weight = tl.load(weight_ptr + start + cols, mask=col_in_range, other=0.0).to(tl.float32)
        bias = tl.load(bias_ptr + start + cols, mask=col_in_range, other=0.0).to(tl.float32)
        centered = (x - pivot[:, None]) - mean[:, None]
        y = centered * rstd[:, None] * weight[None, :] + bias[None, :]
        tl.store(y_ptr + y_rows[:, None] + (start + cols)[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_in_range[:, None] & col_in_range[None, :])


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
def _plan(n_rows: int, n_cols: int, stride_x: int, eps: float, x_dtype: torch.dtype,
          weight_dtype: torch.dtype, bias_dtype: torch.dtype, device: int) -> Launch:
    """The launch the tunables give for x[n_rows, n_cols] (rows stride_x apart), y contiguous:
    the one place where tunables become a launch. Cached by its arguments, which are plain
    values, so a call pays a dictionary lookup; `device` (the current CUDA device, -1 for CPU
    tensors) is part of the key because a compiled kernel is loaded on one device."""
    row_block = triton.next_power_of_2(n_cols)
    if VARIANT == "single_pass" and row_block <= SINGLE_PASS_MAX_N:
        rows, block_n = min(ROWS_PER_PROGRAM, max(1, SINGLE_PASS_MAX_N // row_block)), row_block
        kernel, constexprs = layernorm_single_pass_kernel, (rows, block_n)
    else:
        rows, block_n = ROWS_PER_PROGRAM, min(BLOCK_N, row_block)
        stage_bytes = rows * block_n * x_dtype.itemsize + 2 * block_n * 4  # weight, bias: fp32
        stages = max(1, min(NUM_STAGES, 1 + PIPELINE_SHARED_BYTES // stage_bytes))
        kernel, constexprs = layernorm_welford_kernel, (rows, block_n, stages)
    return _compile(kernel, (triton.cdiv(n_rows, rows), 1, 1),
                    (x_dtype, weight_dtype, bias_dtype, x_dtype),
                    (n_rows, n_cols, stride_x, n_cols, eps, *constexprs),
                    num_warps=_num_warps(rows * block_n, NUM_WARPS))


def layernorm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if y.numel() == 0:
        return y
    n_cols = x.shape[-1]
    x2d = x if x.ndim == 2 else x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    device = torch.cuda.current_device() if x.is_cuda else -1
    launch = _plan(x2d.shape[0], n_cols, x2d.stride(0), float(eps), x.dtype, weight.dtype,
                   bias.dtype, device)
    _launch(launch, x2d, weight.contiguous(), bias.contiguous(), y)
    return y


def kernel_fn(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    return layernorm(x, weight, bias, eps)
