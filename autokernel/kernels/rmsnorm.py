"""RMSNorm over the last dimension of x[M, N] (or over any dim: see the axis kernel), in Triton.

    y[m, :] = x[m, :] / sqrt(mean(x[m, :]²) + eps) * weight

Each program owns a tile of ROWS_PER_PROGRAM rows. x is squared and summed in float32 whatever its
dtype (in fp16, x² overflows above 256), and y is rounded to x's dtype once, at the store.
Two implementations (VARIANT):

- "single_pass": the whole row sits in registers (a [rows, next_pow2(N)] tile): one read of x,
  one write of y. Only for rows of at most SINGLE_PASS_MAX_N columns; longer rows fall back to
  "two_pass", so every tunable combination is correct at every N.
- "two_pass": the row is walked in BLOCK_N-column chunks twice: the first walk accumulates x²
  element-wise (one reduction at the end), the second writes y. x is read twice (the second read
  often hits L2), y written once. Works for any N.

Tunables:
- VARIANT: "single_pass" or "two_pass", as above.
- AXIS_BLOCK_R, AXIS_BLOCK_K, AXIS_NUM_WARPS: the axis kernel's [N step, inner block] tile and
  warps (clamped to next_pow2 of N and of inner).
- ROWS_PER_PROGRAM: rows per program (short rows need several to keep the memory system busy).
  In "single_pass" the launcher lowers it until the tile holds at most SINGLE_PASS_MAX_N elements.
- BLOCK_N: chunk width of the "two_pass" walk (clamped to next_pow2(N)); "single_pass" ignores it.
- SINGLE_PASS_MAX_N: longest row (after rounding up to a power of two) kept in registers.
- NUM_WARPS: warps per program. The launcher clamps it so each thread holds between 8 and 128
  tile elements (fewer warps for tiny tiles, more for huge ones), between 1 and 32 warps.
- NUM_STAGES: software-pipelining depth of the "two_pass" loops; the launcher lowers it so the
  pipeline's buffers fit in PIPELINE_SHARED_BYTES of shared memory.

Over a dim that is not the last (`kernel_fn(x, weight, eps, axis)`, x viewed as [outer, N, inner]
and normalized over N), `rmsnorm_axis_kernel`: a program owns AXIS_BLOCK_K adjacent inner
positions of one outer index, so its loads are AXIS_BLOCK_K consecutive elements (coalesced along
the inner dim, which is contiguous). It walks N twice in AXIS_BLOCK_R steps, summing x² per inner
position, then writing y; like "two_pass" it works for any N. Programs are numbered along one grid
axis (outer × inner blocks).

Host side: `_plan` turns shapes, strides, dtypes and the tunables into launches once per key
(lru_cache) and compiles them ahead (`warmup`); a call then only allocates y and launches the
compiled kernel through `CompiledKernel[grid]`, Triton's cheapest public launch path.
"""

import functools
import math
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rmsnorm"
BACKEND = "triton"

VARIANT = "single_pass"
ROWS_PER_PROGRAM = 1
BLOCK_N = 4096
SINGLE_PASS_MAX_N = 16384
NUM_WARPS = 8
NUM_STAGES = 2
AXIS_BLOCK_R = 16
AXIS_BLOCK_K = 64
AXIS_NUM_WARPS = 4

TUNABLE_SPACE = {
    "VARIANT": ["single_pass", "two_pass"],
    "ROWS_PER_PROGRAM": [1, 2, 4, 8, 16],
    "BLOCK_N": [512, 1024, 2048, 4096, 8192],
    "SINGLE_PASS_MAX_N": [4096, 8192, 16384, 32768, 65536],
    "NUM_WARPS": [1, 2, 4, 8, 16, 32],
    "NUM_STAGES": [1, 2, 3, 4],
    "AXIS_BLOCK_R": [4, 8, 16, 32],
    "AXIS_BLOCK_K": [16, 32, 64, 128, 256],
    "AXIS_NUM_WARPS": [2, 4, 8],
}

# Shared memory the "two_pass" loops' software pipeline may take: each stage past the first
# buffers a chunk of x (and weight) there, and Hopper gives a block at most 227 KiB.
PIPELINE_SHARED_BYTES = 160 * 1024


@triton.jit
def _row_offsets(pid, n_rows, stride_row, BLOCK_M: tl.constexpr):
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_in_range = rows < n_rows
    # Rows past the end re-read the last row (stores are masked), so dead lanes stay finite.
    rows = tl.minimum(rows, n_rows - 1)
    return rows.to(tl.int64) * stride_row, row_in_range


@triton.jit
def rmsnorm_single_pass_kernel(
    x_ptr, weight_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    x_rows, row_in_range = _row_offsets(tl.program_id(0), n_rows, stride_x, BLOCK_M)
    y_rows, _ = _row_offsets(tl.program_id(0), n_rows, stride_y, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_in_range = cols < n_cols

    x = tl.load(x_ptr + x_rows[:, None] + cols[None, :], mask=col_in_range[None, :],
                other=0.0).to(tl.float32)
    # tl.cast: under torch.compile Inductor passes a Python float as fp64
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + tl.cast(eps, tl.float32))
    weight = tl.load(weight_ptr + cols, mask=col_in_range, other=0.0).to(tl.float32)
    y = x * rstd[:, None] * weight[None, :]
    tl.store(y_ptr + y_rows[:, None] + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_in_range[:, None] & col_in_range[None, :])


@triton.jit
def rmsnorm_two_pass_kernel(
    x_ptr, weight_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    x_rows, row_in_range = _row_offsets(tl.program_id(0), n_rows, stride_x, BLOCK_M)
    y_rows, _ = _row_offsets(tl.program_id(0), n_rows, stride_y, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)

    sum_sq = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in tl.range(0, n_cols, BLOCK_N, num_stages=NUM_STAGES):
        x = tl.load(x_ptr + x_rows[:, None] + (start + cols)[None, :],
                    mask=(start + cols < n_cols)[None, :], other=0.0).to(tl.float32)
        sum_sq += x * x
    rstd = tl.rsqrt(tl.sum(sum_sq, axis=1) / n_cols + tl.cast(eps, tl.float32))

    for start in tl.range(0, n_cols, BLOCK_N, num_stages=NUM_STAGES):
        col_in_range = start + cols < n_cols
        x = tl.load(x_ptr + x_rows[:, None] + (start + cols)[None, :],
                    mask=col_in_range[None, :], other=0.0).to(tl.float32)
        weight = tl.load(weight_ptr + start + cols, mask=col_in_range, other=0.0).to(tl.float32)
        y = x * rstd[:, None] * weight[None, :]
        tl.store(y_ptr + y_rows[:, None] + (start + cols)[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_in_range[:, None] & col_in_range[None, :])


@triton.jit
def rmsnorm_axis_kernel(
    x_ptr, weight_ptr, y_ptr, n_norm, n_inner, k_blocks, stride_x_outer, stride_x_norm,
    stride_x_inner, eps, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """y[o, :, k] = x[o, :, k] / sqrt(mean(x[o, :, k]²) + eps) * weight; y contiguous."""
    pid = tl.program_id(0)
    outer = (pid // k_blocks).to(tl.int64)
    ks = (pid % k_blocks) * BLOCK_K + tl.arange(0, BLOCK_K)
    k_in_range = ks < n_inner
    x_columns = x_ptr + outer * stride_x_outer + ks.to(tl.int64)[None, :] * stride_x_inner
    y_columns = y_ptr + outer * n_norm * n_inner + ks.to(tl.int64)[None, :]
    offsets = tl.arange(0, BLOCK_R)

    sum_sq = tl.zeros([BLOCK_R, BLOCK_K], tl.float32)
    for start in range(0, n_norm, BLOCK_R):
        rs = start + offsets
        mask = (rs < n_norm)[:, None] & k_in_range[None, :]
        x = tl.load(x_columns + rs.to(tl.int64)[:, None] * stride_x_norm, mask=mask,
                    other=0.0).to(tl.float32)
        sum_sq += x * x
    rstd = tl.rsqrt(tl.sum(sum_sq, axis=0) / n_norm + tl.cast(eps, tl.float32))

    for start in range(0, n_norm, BLOCK_R):
        rs = start + offsets
        r_in_range = rs < n_norm
        mask = r_in_range[:, None] & k_in_range[None, :]
        x = tl.load(x_columns + rs.to(tl.int64)[:, None] * stride_x_norm, mask=mask,
                    other=0.0).to(tl.float32)
        weight = tl.load(weight_ptr + rs, mask=r_in_range, other=0.0).to(tl.float32)
        y = x * rstd[None, :] * weight[:, None]
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
def _plan(n_rows: int, n_cols: int, stride_x: int, eps: float, x_dtype: torch.dtype,
          weight_dtype: torch.dtype, device: int) -> Launch:
    """The launch the tunables give for x[n_rows, n_cols] (rows stride_x apart), y contiguous:
    the one place where tunables become a launch. Cached by its arguments, which are plain
    values, so a call pays a dictionary lookup; `device` (the current CUDA device, -1 for CPU
    tensors) is part of the key because a compiled kernel is loaded on one device."""
    row_block = triton.next_power_of_2(n_cols)
    if VARIANT == "single_pass" and row_block <= SINGLE_PASS_MAX_N:
        rows, block_n = min(ROWS_PER_PROGRAM, max(1, SINGLE_PASS_MAX_N // row_block)), row_block
        kernel, constexprs = rmsnorm_single_pass_kernel, (rows, block_n)
    else:
        rows, block_n = ROWS_PER_PROGRAM, min(BLOCK_N, row_block)
        stage_bytes = rows * block_n * x_dtype.itemsize + block_n * 4  # weight: up to fp32
        stages = max(1, min(NUM_STAGES, 1 + PIPELINE_SHARED_BYTES // stage_bytes))
        kernel, constexprs = rmsnorm_two_pass_kernel, (rows, block_n, stages)
    return _compile(kernel, (triton.cdiv(n_rows, rows), 1, 1), (x_dtype, weight_dtype, x_dtype),
                    (n_rows, n_cols, stride_x, n_cols, eps, *constexprs),
                    num_warps=_num_warps(rows * block_n, NUM_WARPS))


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if y.numel() == 0:
        return y
    n_cols = x.shape[-1]
    x2d = x if x.ndim == 2 else x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    device = torch.cuda.current_device() if x.is_cuda else -1
    launch = _plan(x2d.shape[0], n_cols, x2d.stride(0), float(eps), x.dtype, weight.dtype, device)
    _launch(launch, x2d, weight.contiguous(), y)
    return y


@functools.lru_cache(maxsize=1024)
def _axis_plan(n_outer: int, n_norm: int, n_inner: int, strides: tuple[int, int, int],
               eps: float, x_dtype: torch.dtype, weight_dtype: torch.dtype, device: int
               ) -> Launch:
    """The launch normalizing x[n_outer, n_norm, n_inner] (those strides) over its dim 1."""
    block_k = max(2, min(AXIS_BLOCK_K, triton.next_power_of_2(n_inner)))
    block_r = max(2, min(AXIS_BLOCK_R, triton.next_power_of_2(n_norm)))
    k_blocks = triton.cdiv(n_inner, block_k)
    return _compile(rmsnorm_axis_kernel, (n_outer * k_blocks, 1, 1),
                    (x_dtype, weight_dtype, x_dtype),
                    (n_norm, n_inner, k_blocks, *strides, eps, block_r, block_k),
                    num_warps=AXIS_NUM_WARPS)


def rmsnorm_over_axis(x: torch.Tensor, weight: torch.Tensor, eps: float,
                      axis: int) -> torch.Tensor:
    """RMSNorm over dim `axis` (non-negative, not the last), weight [x.shape[axis]]."""
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if y.numel() == 0:
        return y
    shape = x.shape
    n_outer, n_norm, n_inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    view = x.reshape(n_outer, n_norm, n_inner)  # a view unless x's strides forbid one
    device = torch.cuda.current_device() if x.is_cuda else -1
    launch = _axis_plan(n_outer, n_norm, n_inner, tuple(view.stride()), float(eps), x.dtype,
                        weight.dtype, device)
    _launch(launch, view, weight.contiguous(), y)
    return y


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
              axis: int = -1) -> torch.Tensor:
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} out of range for {x.ndim} dims")
    axis %= x.ndim
    if axis == x.ndim - 1:
        return rmsnorm(x, weight, eps)
    return rmsnorm_over_axis(x, weight, eps, axis)
