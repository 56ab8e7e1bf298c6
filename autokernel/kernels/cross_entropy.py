"""Cross-entropy starter: mean loss of logits [M, V] against int64 targets [M] (ignore -100).

loss_i = logsumexp(logits[i, :]) - logits[i, targets[i]], and the result is the float32 mean of
loss_i over the rows whose target is not IGNORE_INDEX (NaN when every row is ignored, as torch).

Algorithm
- Kernel 1, one program per row: an online logsumexp over the vocabulary in BLOCK_V chunks
  (never one next_pow2(V) block: V = 128256 would not fit in registers). Only the running max and
  the sum of exp(x - max) are kept, so each logit is read once. The target's logit is one scalar
  load. The row's loss (0 for an ignored row) goes to a float32 buffer.
- Kernel 2, one program: sums the per-row losses and counts the kept rows in a fixed order, then
  divides. No atomics anywhere, so the same input always gives the same bits.

Tunables
- BLOCK_V: vocabulary chunk per loop iteration (clamped to next_pow2(V), at least 16).
- NUM_WARPS, NUM_STAGES: launch options of kernel 1 (the stages pipeline the chunk loads).
- VARIANT: "block_online" rescales one scalar (max, sum) pair per chunk: one exp per logit plus a
  max- and a sum-reduction across the block per chunk. "lane_online" keeps a running (max, sum)
  per lane and reduces across lanes once at the end: no per-chunk cross-warp reduction, but two
  exps per logit.
- MEAN_BLOCK_M: rows per iteration of kernel 2.

Host side: `_plan` turns shapes, strides, dtypes and the tunables into launches once per key
(lru_cache) and compiles them ahead (`warmup`); a call then only allocates the loss buffers and
launches the two compiled kernels through `CompiledKernel[grid]`, Triton's cheapest public launch
path.
"""

import functools
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "cross_entropy"
BACKEND = "triton"

BLOCK_V = 4096
NUM_WARPS = 8
NUM_STAGES = 2
VARIANT = "block_online"
MEAN_BLOCK_M = 1024
TUNABLE_SPACE = {
    "BLOCK_V": [256, 512, 1024, 2048, 4096, 8192],
    "NUM_WARPS": [4, 8, 16],
    "NUM_STAGES": [1, 2, 3],
    "VARIANT": ["block_online", "lane_online"],
    "MEAN_BLOCK_M": [256, 1024, 4096],
}

IGNORE_INDEX = -100


@triton.jit
def _row_losses_kernel(
    logits_ptr,
    targets_ptr,
    losses_ptr,
    n_cols,
    stride_row,
    ignore_index,
    BLOCK_V: tl.constexpr,
    LANE_ONLINE: tl.constexpr,
):
    row = tl.program_id(0)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_row
    offsets = tl.arange(0, BLOCK_V)

    if LANE_ONLINE:
        lane_max = tl.full([BLOCK_V], float("-inf"), tl.float32)
        lane_sum = tl.zeros([BLOCK_V], tl.float32)
        for start in range(0, n_cols, BLOCK_V):
            cols = start + offsets
            x = tl.load(row_ptr + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            new_max = tl.maximum(lane_max, x)
            # A lane that has seen only -inf keeps max -inf, and exp(-inf - (-inf)) is NaN:
            # shift by 0 there instead (every term is exp(-inf) = 0 either way).
            shift = tl.where(new_max == float("-inf"), 0.0, new_max)
            lane_sum = lane_sum * tl.exp(lane_max - shift) + tl.exp(x - shift)
            lane_max = new_max
        row_max = tl.max(lane_max, axis=0)
        row_shift = tl.where(row_max == float("-inf"), 0.0, row_max)
        row_sum = tl.sum(lane_sum * tl.exp(lane_max - row_shift), axis=0)
    else:
        row_max = float("-inf")
        row_sum = 0.0
        for start in range(0, n_cols, BLOCK_V):
            cols = start + offsets
            x = tl.load(row_ptr + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            new_max = tl.maximum(row_max, tl.max(x, axis=0))
            shift = tl.where(new_max == float("-inf"), 0.0, new_max)
            row_sum = row_sum * tl.exp(row_max - shift) + tl.sum(tl.exp(x - shift), axis=0)
            row_max = new_max
    logsumexp = row_max + tl.log(row_sum)

    target = tl.load(targets_ptr + row)
    kept = target != ignore_index
    in_range = (target >= 0) & (target < n_cols)
    target_logit = tl.load(row_ptr + target, mask=kept & in_range, other=0.0).to(tl.float32)
    # torch raises on an out-of-range target; a NaN loss is the loudest thing a kernel can do.
    loss = tl.where(in_range, logsumexp - target_logit, float("nan"))
    tl.store(losses_ptr + row, tl.where(kept, loss, 0.0))


@triton.jit
def _mean_of_kept_kernel(
    losses_ptr,
    targets_ptr,
    out_ptr,
    n_rows,
    ignore_index,
    BLOCK_M: tl.constexpr,
):
    offsets = tl.arange(0, BLOCK_M)
    total = tl.zeros([BLOCK_M], tl.float32)
    kept = tl.zeros([BLOCK_M], tl.int32)
    for start in range(0, n_rows, BLOCK_M):
        rows = start + offsets
        in_bounds = rows < n_rows
        total += tl.load(losses_ptr + rows, mask=in_bounds, other=0.0)
        target = tl.load(targets_ptr + rows, mask=in_bounds, other=ignore_index)
        kept += (target != ignore_index).to(tl.int32)
    # 0 kept rows gives 0/0 = NaN, which is what F.cross_entropy returns.
    tl.store(out_ptr, tl.sum(total, axis=0) / tl.sum(kept, axis=0).to(tl.float32))


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
def _plan(n_rows: int, n_cols: int, stride_row: int, logits_dtype: torch.dtype,
          targets_dtype: torch.dtype, device: int) -> tuple[Launch, Launch]:
    """The two launches (row losses, mean) the tunables give for logits [n_rows, n_cols] (rows
    stride_row apart). Cached by its arguments, which are plain values, so a call pays a
    dictionary lookup; `device` (the current CUDA device, -1 for CPU tensors) is part of the key
    because a compiled kernel is loaded on one device."""
    # Clamp: a block wider than the row only loads masked lanes.
    block_v = max(16, min(BLOCK_V, triton.next_power_of_2(n_cols)))
    row_losses = _compile(
        _row_losses_kernel, (n_rows, 1, 1), (logits_dtype, targets_dtype, torch.float32),
        (n_cols, stride_row, IGNORE_INDEX, block_v, VARIANT == "lane_online"),
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    block_m = max(16, min(MEAN_BLOCK_M, triton.next_power_of_2(n_rows)))
    mean = _compile(_mean_of_kept_kernel, (1, 1, 1), (torch.float32, targets_dtype, torch.float32),
                    (n_rows, IGNORE_INDEX, block_m), num_warps=4)
    return row_losses, mean


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    if logits.ndim != 2 or targets.ndim != 1 or targets.shape[0] != logits.shape[0]:
        raise ValueError(
            f"expected logits [M, V] and targets [M]; got {tuple(logits.shape)} and "
            f"{tuple(targets.shape)}"
        )
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    targets = targets.contiguous()
    n_rows, n_cols = logits.shape
    losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    device = torch.cuda.current_device() if logits.is_cuda else -1
    row_losses, mean = _plan(n_rows, n_cols, logits.stride(0), logits.dtype, targets.dtype, device)
    _launch(row_losses, logits, targets, losses)
    _launch(mean, losses, targets, out)
    return out


def kernel_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return cross_entropy(logits, targets)
