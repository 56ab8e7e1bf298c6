"""Triton starter: matmul, C[..., M, N] = A[..., M, K] @ B[..., K, N] (torch.matmul semantics
for operands of two or more dims: a linear layer's x @ Wᵀ, a batched GEMM, attention's Q @ Kᵀ).

Algorithm: each program owns one BLOCK_M x BLOCK_N tile of one matrix of C and walks K in
BLOCK_K steps, multiplying an A tile by a B tile with `tl.dot` into a float32 accumulator; the
tile is cast to C's dtype once, at the end. Within a matrix, programs are numbered in groups of
GROUP_M row-tiles ("L2 swizzle"): consecutive programs share the same few rows of A and sweep
across B, so both stay in L2 while they are reused. Matrices of a batch follow one another.

Batching and strides: the operands are read through their own strides, so views cost nothing
(Kᵀ as a transposed view, q and k cut out of a fused qkv projection, a broadcast operand with
stride 0). The launcher folds the batch dims into at most two (outer, inner) levels, merging
dims whose strides nest; when B is shared by the whole batch and A's batch dims lay out like
extra rows (x[B, S, K] @ W), the batch becomes one taller GEMM, as torch.matmul does. Only
more than two batch dims that no stride arithmetic merges are copied first. That planning is a
pure function of shapes, strides, dtype and device, cached (`_plan`), so a call costs one
dictionary lookup on the host before its launch.

Split-K (SPLIT_K > 1) cuts K into SPLIT_K contiguous ranges, one program per (tile, range), each
writing a float32 partial tile to a workspace; a second kernel adds the partials in a fixed
order. It is for thin problems (decode: M ~ 16) whose tile count alone cannot fill the GPU, and
is deterministic (no atomics).

Persistent TMA (VARIANT = "persistent_tma", Hopper and newer): one program per SM, each walking
tiles pid, pid + programs, ... in the same grouped order, so launch and prologue (descriptor
creation) are paid once per SM; the K loop is pipelined, the tile loop is not flattened (Triton's
`flatten=True` is untried here). A and B tiles come through tensor
descriptors built on the device (`tl.make_tensor_descriptor`; 2-D, or 4-D [outer, inner, rows,
cols] for a batch): the TMA unit zero-fills past the edges, so the K loop has no masks. B is read
K-contiguous ([N, K]) when it is a transposed weight (x @ Wᵀ, q @ kᵀ). C goes out through a
descriptor when its rows are 16-byte aligned, else through a masked store. Descriptors need the
last dim contiguous, the other strides and the base addresses 16-byte aligned: a call that
breaks that (a column-major A, an fp16 row of K or N not a multiple of 8, an offset view), split-K
(SPLIT_K > 1) or a GPU older than sm_90 runs the tiled kernel instead, still correct. That is
decided per shape in `_plan` (base addresses per call). Device-side descriptors live in global
scratch memory, which the launcher provides by registering an allocator with
`triton.set_allocator` (a context variable: per thread, cheap to set). Triton 3.6's interpreter
runs tensor descriptors, so on CPU this variant runs as on the GPU, with few programs.
WARP_SPECIALIZE asks Triton to split the tile loop into producer (TMA) and consumer (MMA) warps.
Triton 3.6 does that on Hopper only at NUM_WARPS = 4 with BLOCK_M >= 64 (wgmma tiles), and fails
to compile it for fp32, batched (4-D descriptor) problems and 64 x 256 tiles, which run without
it.

Precision: fp16/bf16 tiles go to tensor cores with fp32 accumulation. fp32 inputs use
FP32_PRECISION: "ieee" (exact fp32 FMA dots) or "tf32x3" (three tf32 tensor-core products,
about fp32 accuracy, much faster); plain "tf32" is not offered, it would miss fp32's tolerance.
On CPU (the Triton interpreter, where bf16 `tl.dot` is wrong) tiles are upcast to fp32 first.

Tunables:
  BLOCK_M, BLOCK_N, BLOCK_K  tile sizes; the launcher shrinks a block to next_pow2 of a small dim
                             (minimum 16, tl.dot's smallest tile) so tiny problems waste no work.
  GROUP_M                    row-tiles per L2 group (1 = plain row-major order).
  NUM_WARPS, NUM_STAGES      warps per program; software-pipeline depth of the K loop. The
                             launcher lowers NUM_STAGES, then BLOCK_K, until the kernel fits the
                             GPU's shared memory, so every combination runs.
  SPLIT_K                    K ranges reduced by the second kernel (clamped to the K tile count).
  FP32_PRECISION             dot precision for fp32 inputs.
  VARIANT                    "tiled" (one program per tile, pointer loads; any GPU) or
                             "persistent_tma" (above; falls back to "tiled" per call).
  WARP_SPECIALIZE            persistent_tma only: warp-specialised tile loop (see above).
"""

import functools
import itertools
import math
from typing import Callable, NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "matmul"
BACKEND = "triton"

BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 64
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3
SPLIT_K = 1
FP32_PRECISION = "ieee"
VARIANT = "tiled"
WARP_SPECIALIZE = False

TUNABLE_SPACE = {
    "BLOCK_M": [16, 32, 64, 128],
    "BLOCK_N": [32, 64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "GROUP_M": [1, 4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4, 5],
    "SPLIT_K": [1, 2, 4, 8],
    "FP32_PRECISION": ["ieee", "tf32x3"],
    "VARIANT": ["tiled", "persistent_tma"],
    "WARP_SPECIALIZE": [False, True],
}

SPLIT_REDUCE_BLOCK = 1024
INTERPRETER_PROGRAMS = 3


@triton.jit
def _grouped_tile(tile, num_tiles_m, num_tiles_n, GROUP_M: tl.constexpr):
    """Map a tile number within one matrix to (row-tile, column-tile), GROUP_M row-tiles at a
    time."""
    tiles_per_group = GROUP_M * num_tiles_n
    group = tile // tiles_per_group
    first_row_tile = group * GROUP_M
    rows_in_group = min(num_tiles_m - first_row_tile, GROUP_M)
    within = tile % tiles_per_group
    return first_row_tile + within % rows_in_group, within // rows_in_group


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K, inner_batch, k_per_split,
    stride_a_outer, stride_a_inner, stride_am, stride_ak,
    stride_b_outer, stride_b_inner, stride_bk, stride_bn,
    stride_c_split,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_matrix = num_tiles_m * num_tiles_n
    pid = tl.program_id(0)
    matrix = pid // tiles_per_matrix
    tile_m, tile_n = _grouped_tile(pid % tiles_per_matrix, num_tiles_m, num_tiles_n, GROUP_M)
    split = tl.program_id(1)

    outer = (matrix // inner_batch).to(tl.int64)
    inner = (matrix % inner_batch).to(tl.int64)
    a_ptr += outer * stride_a_outer + inner * stride_a_inner
    b_ptr += outer * stride_b_outer + inner * stride_b_inner

    # Rows/columns past the edge are wrapped back in range instead of masked: their loads are
    # valid (and unmasked loads pipeline better), and the store below drops their results.
    rows = (tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    cols = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    k_begin = split * k_per_split
    k_end = min(K, k_begin + k_per_split)
    ks = k_begin + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows.to(tl.int64)[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols.to(tl.int64)[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_begin, k_end, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_in_range = (k + tl.arange(0, BLOCK_K)) < k_end
            a = tl.load(a_ptrs, mask=k_in_range[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_in_range[:, None], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # C (or the split-K workspace) is contiguous: [splits, matrices, M, N].
    out_rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = (
        c_ptr
        + split.to(tl.int64) * stride_c_split
        + matrix.to(tl.int64) * M * N
        + out_rows.to(tl.int64)[:, None] * N
        + out_cols[None, :]
    )
    in_bounds = (out_rows[:, None] < M) & (out_cols[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=in_bounds)


@triton.jit
def split_k_reduce_kernel(partial_ptr, c_ptr, numel, num_splits, BLOCK: tl.constexpr):
    """c[i] = sum over s of partial[s, i], s in increasing order (bitwise reproducible)."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_bounds = offsets < numel
    partial_ptrs = partial_ptr + offsets
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(0, num_splits):
        total += tl.load(partial_ptrs, mask=in_bounds, other=0.0)
        partial_ptrs += numel  # pointer arithmetic is 64-bit: no overflow past 2^31 elements
    tl.store(c_ptr + offsets, total.to(c_ptr.dtype.element_ty), mask=in_bounds)


# ---------------------------------------------------------------------------------------------
# VARIANT = "persistent_tma": one program per SM walks the tiles; operands move through TMA.


@triton.jit
def _descriptor(ptr, outer, inner, rows, cols, stride_outer, stride_inner, stride_row,
                BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, BATCHED: tl.constexpr):
    """A TMA descriptor over a [rows, cols] matrix (cols contiguous); batched, over
    [outer, inner, rows, cols]. Built on the device, so no host-side descriptor objects."""
    if BATCHED:
        desc = tl.make_tensor_descriptor(ptr, [outer, inner, rows, cols],
                                         [stride_outer, stride_inner, stride_row, 1],
                                         [1, 1, BLOCK_ROWS, BLOCK_COLS])
    else:
        desc = tl.make_tensor_descriptor(ptr, [rows, cols], [stride_row, 1],
                                         [BLOCK_ROWS, BLOCK_COLS])
    return desc


@triton.jit
def _load_tile(desc, outer, inner, row, col, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
               BATCHED: tl.constexpr):
    """One [BLOCK_ROWS, BLOCK_COLS] tile; the TMA unit fills what lies past the edges with 0."""
    if BATCHED:
        tile = desc.load([outer, inner, row, col]).reshape(BLOCK_ROWS, BLOCK_COLS)
    else:
        tile = desc.load([row, col])
    return tile


@triton.jit
def matmul_persistent_tma_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K, outer_batch, inner_batch,
    a_outer, a_inner, stride_a_outer, stride_a_inner, stride_a_row,
    b_outer, b_inner, stride_b_outer, stride_b_inner, stride_b_row,
    stride_c_outer, stride_c_inner,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    B_TRANSPOSED: tl.constexpr,
    BATCHED: tl.constexpr,
    STORE_DESCRIPTOR: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    # An operand broadcast over a batch level has size 1 there (the host says so): `% a_outer`
    # then always reads its one matrix.
    a_desc = _descriptor(a_ptr, a_outer, a_inner, M, K, stride_a_outer, stride_a_inner,
                         stride_a_row, BLOCK_M, BLOCK_K, BATCHED)
    if B_TRANSPOSED:  # B is Wᵀ of a row-major [N, K] weight: tiles are read K-contiguous
        b_desc = _descriptor(b_ptr, b_outer, b_inner, N, K, stride_b_outer, stride_b_inner,
                             stride_b_row, BLOCK_N, BLOCK_K, BATCHED)
    else:
        b_desc = _descriptor(b_ptr, b_outer, b_inner, K, N, stride_b_outer, stride_b_inner,
                             stride_b_row, BLOCK_K, BLOCK_N, BATCHED)
    if STORE_DESCRIPTOR:  # C is contiguous [outer, inner, M, N]
        c_desc = _descriptor(c_ptr, outer_batch, inner_batch, M, N, stride_c_outer,
                             stride_c_inner, N, BLOCK_M, BLOCK_N, BATCHED)

    num_tiles_m = tl.cdiv(M, BLOCK_M)
    num_tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_matrix = num_tiles_m * num_tiles_n
    num_tiles = tiles_per_matrix * outer_batch * inner_batch
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0),
                         warp_specialize=WARP_SPECIALIZE):
        matrix = tile // tiles_per_matrix
        tile_m, tile_n = _grouped_tile(tile % tiles_per_matrix, num_tiles_m, num_tiles_n, GROUP_M)
        outer = matrix // inner_batch
        inner = matrix % inner_batch
        off_m = tile_m * BLOCK_M
        off_n = tile_n * BLOCK_N

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k_tile in range(k_tiles):
            off_k = k_tile * BLOCK_K
            a = _load_tile(a_desc, outer % a_outer, inner % a_inner, off_m, off_k,
                           BLOCK_M, BLOCK_K, BATCHED)
            if B_TRANSPOSED:
                b = _load_tile(b_desc, outer % b_outer, inner % b_inner, off_n, off_k,
                               BLOCK_N, BLOCK_K, BATCHED).T
            else:
                b = _load_tile(b_desc, outer % b_outer, inner % b_inner, off_k, off_n,
                               BLOCK_K, BLOCK_N, BATCHED)
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)

        out = acc.to(c_ptr.dtype.element_ty)
        if STORE_DESCRIPTOR:  # the TMA unit drops what lies past M and N
            if BATCHED:
                c_desc.store([outer, inner, off_m, off_n], out.reshape(1, 1, BLOCK_M, BLOCK_N))
            else:
                c_desc.store([off_m, off_n], out)
        else:  # rows of C not 16-byte aligned: TMA cannot address them
            out_rows = off_m + tl.arange(0, BLOCK_M)
            out_cols = off_n + tl.arange(0, BLOCK_N)
            c_ptrs = (c_ptr + matrix.to(tl.int64) * M * N + out_rows.to(tl.int64)[:, None] * N
                      + out_cols[None, :])
            in_bounds = (out_rows[:, None] < M) & (out_cols[None, :] < N)
            tl.store(c_ptrs, out, mask=in_bounds)


@functools.lru_cache(maxsize=None)
def _shared_memory_bytes(device_index: int) -> int:
    props = torch.cuda.get_device_properties(device_index)
    return int(getattr(props, "shared_memory_per_block_optin", props.shared_memory_per_block))


def _estimated_fit(block_k: int, num_stages: int, bytes_per_k: int, device: torch.device
                   ) -> tuple[int, int]:
    """(BLOCK_K, stages) whose operand buffers, stages x bytes_per_k x BLOCK_K, fit in shared
    memory: BLOCK_K halves first if even one stage cannot fit."""
    if device.type != "cuda":
        return block_k, num_stages  # the interpreter has no shared memory
    budget = _shared_memory_bytes(0 if device.index is None else device.index)
    while block_k > 16 and bytes_per_k * block_k > budget:
        block_k //= 2
    return block_k, max(1, min(num_stages, budget // (bytes_per_k * block_k)))


def _launch_fitting_shared_memory(launch: Callable[[int, int], None], block_k: int,
                                  num_stages: int) -> None:
    """launch(block_k, num_stages), shrinking the pipeline and then BLOCK_K while the compiled
    kernel still needs more shared memory than the GPU has. The estimate that picked the
    starting point leaves out Triton's epilogue and operand-conversion buffers, so this is rare; a
    cache of the pair that fits would be call-time state, which the harness forbids."""
    while True:
        try:
            launch(block_k, num_stages)
            return
        except triton.runtime.errors.OutOfResources:
            if num_stages > 1:
                num_stages -= 1
            elif block_k > 16:
                block_k //= 2
            else:
                raise


def _block(requested: int, dim: int) -> int:
    """A block no larger than the dim needs (next power of two), and at least tl.dot's 16."""
    return max(16, min(requested, triton.next_power_of_2(dim)))


def _broadcast(a_batch: tuple[int, ...], b_batch: tuple[int, ...]) -> tuple[int, ...]:
    """The batch shape both operands broadcast to (numpy rules, as torch.matmul)."""
    ndim = max(len(a_batch), len(b_batch))
    a_batch = (1,) * (ndim - len(a_batch)) + a_batch
    b_batch = (1,) * (ndim - len(b_batch)) + b_batch
    if any(x != y and 1 not in (x, y) for x, y in zip(a_batch, b_batch)):
        raise ValueError(f"matmul batch dims {a_batch} and {b_batch} do not broadcast")
    return tuple(max(x, y) if 0 not in (x, y) else 0 for x, y in zip(a_batch, b_batch))


def _batch_strides(sizes: tuple[int, ...], strides: tuple[int, ...], batch: tuple[int, ...]
                   ) -> tuple[int, ...]:
    """An operand's strides over the broadcast batch dims: 0 along the dims it is broadcast in."""
    pad = len(batch) - len(sizes)
    return tuple(0 if i < pad or sizes[i - pad] == 1 else strides[i - pad]
                 for i in range(len(batch)))


def _as_one_dim(sizes: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The stride of these dims taken as one (each stride the next one's times its size, dims
    of size 1 ignored), or None when they do not nest."""
    kept = [(n, s) for n, s in zip(sizes, strides) if n != 1]
    if any(s != s_next * n_next for (_, s), (n_next, s_next) in itertools.pairwise(kept)):
        return None
    return kept[-1][1] if kept else strides[-1]


def _merged_batch(batch: tuple[int, ...], a_strides: tuple[int, ...],
                  b_strides: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """The batch as few (size, a stride, b stride) dims as the strides allow, row-major order
    kept (C is contiguous, so its batch index is the flat one whatever merges)."""
    dims: list[tuple[int, int, int]] = []
    for size, sa, sb in zip(batch, a_strides, b_strides):
        if size == 1:
            continue
        if dims and dims[-1][1] == sa * size and dims[-1][2] == sb * size:
            dims[-1] = (dims[-1][0] * size, sa, sb)
        else:
            dims.append((size, sa, sb))
    return dims


# ---------------------------------------------------------------------------------------------
# Host side of persistent_tma: which calls TMA can address, and what its launch needs.


@functools.lru_cache(maxsize=None)
def _has_tma(device: torch.device) -> bool:
    """Whether tensor descriptors work here: sm_90 and newer, or the interpreter (CPU tensors),
    which runs them with numpy."""
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(0 if device.index is None else device.index) >= (9, 0)


@functools.lru_cache(maxsize=None)
def _persistent_programs(device: torch.device) -> int:
    """Programs of the persistent kernel: one per SM (a few on CPU, so each walks several)."""
    if device.type != "cuda":
        return INTERPRETER_PROGRAMS
    index = 0 if device.index is None else device.index
    return torch.cuda.get_device_properties(index).multi_processor_count


def _descriptor_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Global memory Triton asks for at launch, where the kernel writes its TMA descriptors."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _descriptor_view(sizes: tuple[int, ...], strides: tuple[int, ...], itemsize: int
                     ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """How a TMA descriptor addresses an operand of these sizes and strides: (sizes, strides of
    every dim but the last). TMA needs the last dim contiguous and the other strides multiples of
    16 bytes. A dim of size 1 or stride 0 (broadcast) is only ever read at index 0, so it becomes
    size 1 with a placeholder stride. None when TMA cannot address the operand."""
    if strides[-1] != 1 and sizes[-1] != 1:
        return None
    aligned = 16 // itemsize
    placeholder = aligned * triton.cdiv(sizes[-1], aligned)
    view_sizes, view_strides = [], []
    for size, stride in zip(sizes[:-1], strides[:-1]):
        if size == 1 or stride == 0:
            size, stride = 1, placeholder
        elif stride % aligned:
            return None
        view_sizes.append(size)
        view_strides.append(stride)
    return (*view_sizes, sizes[-1]), tuple(view_strides)


class TmaLayout(NamedTuple):
    """The persistent kernel's descriptors: per operand, the (outer, inner) batch sizes it has
    (1 where broadcast) and its (outer, inner, row) strides; B read as [N, K] when transposed."""
    a_batch: tuple[int, ...]
    a_strides: tuple[int, ...]
    b_batch: tuple[int, ...]
    b_strides: tuple[int, ...]
    b_transposed: bool
    store_descriptor: bool  # C's rows are 16-byte aligned
    warp_specialize: bool


def _tma_layout(outer: int, inner: int, m: int, n: int, k: int,
                a_strides: tuple[int, int, int, int], b_strides: tuple[int, int, int, int],
                dtype: torch.dtype, device: torch.device, block_m: int, block_n: int
                ) -> TmaLayout | None:
    """The descriptors' view of a problem, or None where this call runs the tiled kernel: the
    tiled VARIANT, split-K, a GPU without TMA, or an operand TMA cannot address."""
    if VARIANT != "persistent_tma" or SPLIT_K > 1 or not _has_tma(device):
        return None
    size = dtype.itemsize
    a_view = _descriptor_view((outer, inner, m, k), a_strides, size)
    b_view = _descriptor_view((outer, inner, k, n), b_strides, size)
    b_transposed = b_view is None
    if b_transposed:
        sb_outer, sb_inner, sb_k, sb_n = b_strides
        b_view = _descriptor_view((outer, inner, n, k), (sb_outer, sb_inner, sb_n, sb_k), size)
    if a_view is None or b_view is None:
        return None
    c_view = _descriptor_view((outer, inner, m, n), (inner * m * n, m * n, n, 1), size)
    # Triton 3.6's Hopper warp specialisation fails to compile fp32 dots, 4-D descriptor loads
    # and 64 x 256 tiles (checked with sm_90 compiles).
    warp_specialize = (WARP_SPECIALIZE and outer * inner == 1 and dtype != torch.float32
                       and (block_m, block_n) != (64, 256))
    return TmaLayout(a_view[0][:2], a_view[1], b_view[0][:2], b_view[1], b_transposed,
                     c_view is not None, warp_specialize)


class LaunchPlan(NamedTuple):
    out_shape: tuple[int, ...]
    m: int
    n: int
    k: int
    outer: int  # matrices = outer x inner
    inner: int
    a_strides: tuple[int, int, int, int]  # outer, inner, row (M), K
    b_strides: tuple[int, int, int, int]  # outer, inner, K, column (N)
    block_m: int
    block_n: int
    block_k: int
    num_stages: int
    precision: str
    upcast: bool
    tma: TmaLayout | None  # None: the tiled kernel


@functools.lru_cache(maxsize=4096)
def _plan(a_shape: tuple[int, ...], a_stride: tuple[int, ...], b_shape: tuple[int, ...],
          b_stride: tuple[int, ...], dtype: torch.dtype, device: torch.device
          ) -> LaunchPlan | None:
    """Everything a call's launch needs that its shapes, strides, dtype and device decide; None
    when more than two batch dims remain after merging (the caller copies those to 3-D)."""
    if len(a_shape) < 2 or len(b_shape) < 2 or a_shape[-1] != b_shape[-2]:
        raise ValueError(f"matmul needs a[..., M, K] and b[..., K, N]; got {tuple(a_shape)} "
                         f"and {tuple(b_shape)}")
    m, k = a_shape[-2:]
    n = b_shape[-1]
    batch = _broadcast(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    out_shape = (*batch, m, n)
    a_batch = _batch_strides(tuple(a_shape[:-2]), tuple(a_stride[:-2]), batch)
    b_batch = _batch_strides(tuple(b_shape[:-2]), tuple(b_stride[:-2]), batch)
    stride_am, stride_ak = a_stride[-2:]
    rows = m
    # x[..., M, K] @ W[K, N]: when x's batch dims nest over its rows, they are more rows of
    # one GEMM (fewer, fuller tiles) rather than a batch of short ones.
    row_stride = _as_one_dim((*batch, m), (*a_batch, stride_am)) if batch and not any(b_batch) \
        else None
    if row_stride is not None:
        rows, stride_am, batch, a_batch, b_batch = m * math.prod(batch), row_stride, (), (), ()
    dims = _merged_batch(batch, a_batch, b_batch)
    if len(dims) > 2:
        return None
    (outer, sa_outer, sb_outer), (inner, sa_inner, sb_inner) = (
        [(1, 0, 0)] * (2 - len(dims)) + dims)

    upcast = device.type == "cpu"  # CPU tensors only ever run in the interpreter
    precision = FP32_PRECISION if dtype == torch.float32 else "ieee" if upcast else "tf32"
    block_m, block_n = _block(BLOCK_M, rows), _block(BLOCK_N, n)
    block_k, num_stages = _estimated_fit(_block(BLOCK_K, k), NUM_STAGES,
                                         (block_m + block_n) * dtype.itemsize, device)
    a_strides = (sa_outer, sa_inner, stride_am, stride_ak)
    b_strides = (sb_outer, sb_inner, *b_stride[-2:])
    tma = _tma_layout(outer, inner, rows, n, k, a_strides, b_strides, dtype, device, block_m,
                      block_n)
    return LaunchPlan(out_shape, rows, n, k, outer, inner, a_strides, b_strides,
                      block_m, block_n, block_k, num_stages, precision, upcast, tma)


def _launch(plan: LaunchPlan, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, block_k: int,
            num_stages: int) -> None:
    m, n, k = plan.m, plan.n, plan.k
    k_tiles = triton.cdiv(k, block_k)
    k_per_split = triton.cdiv(k_tiles, min(SPLIT_K, k_tiles)) * block_k
    num_splits = triton.cdiv(k, k_per_split)  # no empty ranges
    numel = plan.outer * plan.inner * m * n
    if num_splits == 1:
        target = c
    else:
        target = torch.empty((num_splits, numel), dtype=torch.float32, device=c.device)
    tiles = triton.cdiv(m, plan.block_m) * triton.cdiv(n, plan.block_n)
    matmul_kernel[(tiles * plan.outer * plan.inner, num_splits)](
        a, b, target, m, n, k, plan.inner, k_per_split, *plan.a_strides, *plan.b_strides, numel,
        BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, BLOCK_K=block_k, GROUP_M=GROUP_M,
        EVEN_K=k % block_k == 0, DOT_PRECISION=plan.precision, UPCAST=plan.upcast,
        num_warps=NUM_WARPS, num_stages=num_stages,
    )
    if num_splits > 1:
        split_k_reduce_kernel[(triton.cdiv(numel, SPLIT_REDUCE_BLOCK),)](
            target, c, numel, num_splits, BLOCK=SPLIT_REDUCE_BLOCK
        )


def _launch_persistent_tma(plan: LaunchPlan, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                           block_k: int, num_stages: int) -> None:
    tma = plan.tma
    tiles = (triton.cdiv(plan.m, plan.block_m) * triton.cdiv(plan.n, plan.block_n)
             * plan.outer * plan.inner)
    # Device-side descriptors need a little global scratch, from this allocator (it is a
    # context variable: set for this thread, cheap to set again).
    triton.set_allocator(_descriptor_scratch)
    matmul_persistent_tma_kernel[(min(tiles, _persistent_programs(c.device)),)](
        a, b, c, plan.m, plan.n, plan.k, plan.outer, plan.inner,
        *tma.a_batch, *tma.a_strides, *tma.b_batch, *tma.b_strides,
        plan.inner * plan.m * plan.n, plan.m * plan.n,  # 64-bit when large, unlike in-kernel math
        BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, BLOCK_K=block_k, GROUP_M=GROUP_M,
        B_TRANSPOSED=tma.b_transposed, BATCHED=plan.outer * plan.inner > 1,
        STORE_DESCRIPTOR=tma.store_descriptor, DOT_PRECISION=plan.precision,
        UPCAST=plan.upcast, WARP_SPECIALIZE=tma.warp_specialize,
        num_warps=NUM_WARPS, num_stages=num_stages,
    )


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype != b.dtype:
        raise ValueError(f"a and b must share a dtype; got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"a and b must be on one device; got {a.device} and {b.device}")
    plan = _plan(a.shape, a.stride(), b.shape, b.stride(), a.dtype, a.device)
    if plan is None:  # batch dims no stride arithmetic merges: one contiguous batch dim
        batch = _broadcast(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
        a3 = a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
        b3 = b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
        return matmul(a3, b3).view(*batch, a.shape[-2], b.shape[-1])
    c = torch.empty(plan.out_shape, dtype=a.dtype, device=a.device)
    if c.numel() == 0:
        return c
    if plan.k == 0:
        return c.zero_()
    # TMA also needs 16-byte aligned base addresses, which views need not have.
    use_tma = plan.tma is not None and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0
    launch = _launch_persistent_tma if use_tma else _launch
    _launch_fitting_shared_memory(
        lambda block_k, num_stages: launch(plan, a, b, c, block_k, num_stages),
        plan.block_k, plan.num_stages,
    )
    return c


def kernel_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B in A's dtype (fp32 accumulation), batched over leading dims like torch.matmul."""
    return matmul(a, b)
