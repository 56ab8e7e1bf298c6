"""Linear cross-entropy starter: the mean loss of hidden [N, D] @ weight [V, D]ᵀ against int64
targets [N] (ignore -100), without ever writing the [N, V] logits.

loss_i = logsumexp_v(h_i · w_v) - h_i · w_{t_i}, and the result is the float32 mean of loss_i
over the rows whose target is not IGNORE_INDEX (NaN when every row is ignored, as torch).

Algorithm
- Kernel 1, one program per (block of BLOCK_M rows, slice of the vocabulary): for each BLOCK_V
  block of its slice it computes the [BLOCK_M, BLOCK_V] logit tile as a GEMM over D in BLOCK_K
  steps (`tl.dot`, float32 accumulator), then folds the tile into a running max and a running
  sum of exp(logit - max) per row (an online logsumexp), and adds the target's logit where the
  target falls in the tile. The tile lives in registers only. Each program writes three floats
  per row: its slice's max, sum and target logit.
- Splitting the vocabulary (SPLIT_V slices) gives the GPU enough programs when N is small
  (4096 rows / BLOCK_M 64 = 64 row blocks would leave half an H100 idle).
- Kernel 2, one program: for each row merges its SPLIT_V partial (max, sum) pairs into the row's
  logsumexp, subtracts the target logit, and sums the kept rows' losses and counts them in a
  fixed order, then divides. No atomics, so the same input always gives the same bits.

Memory beyond the inputs: 3·SPLIT_V·N floats, never N·V.

Tunables
- BLOCK_M, BLOCK_V, BLOCK_K: the logit tile and the GEMM's K step (each clamped to next_pow2 of
  its dim, at least 16 for tl.dot).
- SPLIT_V: vocabulary slices per row block; 0 picks the fewest (a power of two) that give at
  least AUTO_PROGRAMS programs, capped at the number of BLOCK_V blocks.
  The grid's first axis is the row block, which varies fastest, so programs running together
  share one slice's weight tiles in L2.
- NUM_WARPS, NUM_STAGES: launch options of kernel 1 (the stages pipeline the K loop's loads).
- FP32_PRECISION: "ieee" or "tf32x3" for fp32 inputs (fp16/bf16 always use tensor cores).

Host side: `_plan` turns shapes, strides, dtypes and the tunables into launches once per key
(lru_cache) and compiles them ahead (`warmup`); a call allocates the partial buffers and
launches the two compiled kernels. On CPU (the Triton interpreter, where bf16 `tl.dot` is wrong)
tiles are upcast to fp32 before each dot.
"""

import functools
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "linear_cross_entropy"
BACKEND = "triton"

BLOCK_M = 64
BLOCK_V = 128
BLOCK_K = 64
SPLIT_V = 0
NUM_WARPS = 8
NUM_STAGES = 3
FP32_PRECISION = "ieee"
TUNABLE_SPACE = {
    "BLOCK_M": [16, 32, 64, 128],
    "BLOCK_V": [32, 64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "SPLIT_V": [0, 1, 2, 4, 8, 16, 32],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [1, 2, 3, 4],
    "FP32_PRECISION": ["ieee", "tf32x3"],
}

AUTO_PROGRAMS = 512  # about four waves of an H100's 132 SMs
MERGE_BLOCK_M = 256
IGNORE_INDEX = -100


@triton.jit
def _partial_logsumexp_kernel(
    hidden_ptr, weight_ptr, targets_ptr,
    max_ptr, sum_ptr, target_logit_ptr,
    N, D, V,
    stride_hn, stride_hd,
    stride_wv, stride_wd,
    blocks_per_split,
    BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    row_block = tl.program_id(0)
    split = tl.program_id(1)

    rows = row_block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_in_range = rows < N
    # Rows past N wrap back in range: their loads stay valid without masks, their stores drop.
    safe_rows = (rows % N).to(tl.int64)
    targets = tl.load(targets_ptr + safe_rows)
    ks = tl.arange(0, BLOCK_K)

    running_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    running_sum = tl.zeros([BLOCK_M], tl.float32)
    target_logit = tl.zeros([BLOCK_M], tl.float32)

    v_start = split * blocks_per_split * BLOCK_V
    v_end = tl.minimum(V, v_start + blocks_per_split * BLOCK_V)
    for v in range(v_start, v_end, BLOCK_V):
        cols = v + tl.arange(0, BLOCK_V)
        col_in_range = cols < V
        safe_cols = (cols % V).to(tl.int64)

        # The logit tile: hidden rows [BLOCK_M, D] times the weight's [D, BLOCK_V] transpose,
        # read through the weight's strides (no copy of Wᵀ).
        h_ptrs = hidden_ptr + safe_rows[:, None] * stride_hn + ks[None, :] * stride_hd
        w_ptrs = weight_ptr + ks[:, None] * stride_wd + safe_cols[None, :] * stride_wv
        logits = tl.zeros([BLOCK_M, BLOCK_V], tl.float32)
        for k in range(0, D, BLOCK_K):
            if EVEN_K:
                h = tl.load(h_ptrs)
                w = tl.load(w_ptrs)
            else:
                k_in_range = (k + ks) < D
                h = tl.load(h_ptrs, mask=k_in_range[None, :], other=0.0)
                w = tl.load(w_ptrs, mask=k_in_range[:, None], other=0.0)
            if UPCAST:
                h = h.to(tl.float32)
                w = w.to(tl.float32)
            logits = tl.dot(h, w, logits, input_precision=DOT_PRECISION)
            h_ptrs += BLOCK_K * stride_hd
            w_ptrs += BLOCK_K * stride_wd

        # Online logsumexp: every block holds at least one real column, so the new max is
        # finite and exp(-inf - max) = 0 rescales the empty start correctly.
        logits = tl.where(col_in_range[None, :], logits, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(logits, axis=1))
        running_sum = running_sum * tl.exp(running_max - new_max) + \
            tl.sum(tl.exp(logits - new_max[:, None]), axis=1)
        running_max = new_max

        # The target's logit, where it falls in this tile (an ignored -100 never matches).
        hit = cols[None, :] == targets[:, None]
        target_logit += tl.sum(tl.where(hit, logits, 0.0), axis=1)

    out = split * N + rows
    tl.store(max_ptr + out, running_max, mask=row_in_range)
    tl.store(sum_ptr + out, running_sum, mask=row_in_range)
    tl.store(target_logit_ptr + out, target_logit, mask=row_in_range)


@triton.jit
def _merge_and_mean_kernel(
    max_ptr, sum_ptr, target_logit_ptr, targets_ptr, out_ptr,
    N, V, n_splits,
    ignore_index,
    BLOCK_M: tl.constexpr,
):
    offsets = tl.arange(0, BLOCK_M)
    total = tl.zeros([BLOCK_M], tl.float32)
    kept = tl.zeros([BLOCK_M], tl.int32)
    for start in range(0, N, BLOCK_M):
        rows = start + offsets
        in_range = rows < N
        row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
        row_sum = tl.zeros([BLOCK_M], tl.float32)
        row_target = tl.zeros([BLOCK_M], tl.float32)
        for split in range(0, n_splits):
            part = split * N + rows
            part_max = tl.load(max_ptr + part, mask=in_range, other=float("-inf"))
            part_sum = tl.load(sum_ptr + part, mask=in_range, other=0.0)
            new_max = tl.maximum(row_max, part_max)
            # An empty slice (-inf, 0) next to another: shift by 0, not by -inf (NaN).
            shift = tl.where(new_max == float("-inf"), 0.0, new_max)
            row_sum = row_sum * tl.exp(row_max - shift) + part_sum * tl.exp(part_max - shift)
            row_max = new_max
            row_target += tl.load(target_logit_ptr + part, mask=in_range, other=0.0)
        target = tl.load(targets_ptr + rows, mask=in_range, other=ignore_index)
        keep = in_range & (target != ignore_index)
        # torch raises on an out-of-range target; a NaN loss is the loudest a kernel can be.
        valid = (target >= 0) & (target < V)
        # Rows past N hold sum 0; log(1) keeps their (dropped) loss finite and quiet.
        logsumexp = row_max + tl.log(tl.where(in_range, row_sum, 1.0))
        loss = tl.where(valid, logsumexp - row_target, float("nan"))
        total += tl.where(keep, loss, 0.0)
        kept += keep.to(tl.int32)
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
    """Compile `kernel` ahead for tensors of `tensor_dtypes` followed by `args` (the values every
    launch of the plan passes, so the compiled specialization is the one launched)."""
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


def _block(requested: int, dim: int) -> int:
    """A block no larger than the dim needs (next power of two), and at least tl.dot's 16."""
    return max(16, min(requested, triton.next_power_of_2(dim)))


def _splits(row_blocks: int, v_blocks: int) -> int:
    if SPLIT_V:
        return max(1, min(SPLIT_V, v_blocks))
    splits = 1
    while row_blocks * splits < AUTO_PROGRAMS and splits < v_blocks:
        splits *= 2
    return min(splits, v_blocks)


@functools.lru_cache(maxsize=1024)
def _plan(n: int, d: int, v: int, hidden_strides: tuple[int, int],
          weight_strides: tuple[int, int], dtype: torch.dtype, targets_dtype: torch.dtype,
          device: int) -> tuple[Launch, Launch, int]:
    """(partials launch, merge launch, splits) for these shapes; cached by its plain-value
    arguments, `device` (the current CUDA device, -1 for CPU tensors) included because a
    compiled kernel is loaded on one device."""
    upcast = device < 0  # CPU tensors only ever run in the interpreter
    precision = FP32_PRECISION if dtype == torch.float32 else "ieee" if upcast else "tf32"
    block_m, block_v, block_k = _block(BLOCK_M, n), _block(BLOCK_V, v), _block(BLOCK_K, d)
    row_blocks, v_blocks = triton.cdiv(n, block_m), triton.cdiv(v, block_v)
    splits = _splits(row_blocks, v_blocks)
    blocks_per_split = triton.cdiv(v_blocks, splits)
    partials = _compile(
        _partial_logsumexp_kernel, (row_blocks, splits, 1),
        (dtype, dtype, targets_dtype, torch.float32, torch.float32, torch.float32),
        (n, d, v, *hidden_strides, *weight_strides, blocks_per_split,
         block_m, block_v, block_k, d % block_k == 0, precision, upcast),
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    merge = _compile(
        _merge_and_mean_kernel, (1, 1, 1),
        (torch.float32, torch.float32, torch.float32, targets_dtype, torch.float32),
        (n, v, splits, IGNORE_INDEX, max(16, min(MERGE_BLOCK_M, triton.next_power_of_2(n)))),
        num_warps=4,
    )
    return partials, merge, splits


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor,
                         targets: torch.Tensor) -> torch.Tensor:
    if hidden.ndim != 2 or weight.ndim != 2 or targets.ndim != 1 or \
            weight.shape[1] != hidden.shape[1] or targets.shape[0] != hidden.shape[0]:
        raise ValueError(
            "expected hidden [N, D], weight [V, D] and targets [N]; got "
            f"{tuple(hidden.shape)}, {tuple(weight.shape)} and {tuple(targets.shape)}")
    if hidden.dtype != weight.dtype:
        raise ValueError(f"hidden is {hidden.dtype} but weight is {weight.dtype}")
    targets = targets.contiguous()
    n, d = hidden.shape
    v = weight.shape[0]
    device = torch.cuda.current_device() if hidden.is_cuda else -1
    partials, merge, splits = _plan(n, d, v, hidden.stride(), weight.stride(), hidden.dtype,
                                    targets.dtype, device)
    # Three allocations, not views of one: each starts 16-byte aligned, as compiled for.
    row_max, row_sum, target_logit = (
        torch.empty((splits, n), dtype=torch.float32, device=hidden.device) for _ in range(3))
    out = torch.empty((), dtype=torch.float32, device=hidden.device)
    _launch(partials, hidden, weight, targets, row_max, row_sum, target_logit)
    _launch(merge, row_max, row_sum, target_logit, targets, out)
    return out


def kernel_fn(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return linear_cross_entropy(hidden, weight, targets)
