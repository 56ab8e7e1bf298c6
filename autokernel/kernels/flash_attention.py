"""Triton starter: flash_attention, O = softmax(Q Kᵀ · scale [+ causal mask]) V.

q, k, v, o are [B, H, S, D] of one dtype (fp16, bf16, fp32), any strides, any S and D; causal
lets query i see keys 0..i; scale defaults to 1/sqrt(D).

Algorithm (FlashAttention-2 forward): each program owns BLOCK_M queries of one (batch, head) and
streams K/V in BLOCK_N-key blocks, keeping an online softmax in float32: a running row max m, a
running row sum l and an unnormalised output accumulator, rescaled by exp(m_old - m_new) whenever
the max grows; the output is divided by l once at the end. The S x S score matrix never touches
memory, and nothing is allocated but the output (and the tma variant's descriptor scratch, below).
Scores are taken in the log2 domain (scale·log2(e) folded into one multiply, exp2).

The key range splits in two loops: blocks that need no mask (every key visible to every query
of the block, all in range) and the rest (the causal diagonal and/or the ragged last block),
which apply the causal and sequence-end masks. Under causal masking a program stops at its
diagonal, and programs are numbered heaviest (last) query block first so the long ones start
early.

Head dims. Up to RESIDENT_HEAD_DIM (256) the head dim is one tile, padded to a power of two
(>= 16) with masked loads and stores (so D = 72, 80 or 96 work): Q is loaded once and the
accumulator holds whole output rows. A wider head (320, 512, 768, 1024, ...) does not fit one
program's registers that way, so it is tiled twice:
  - QKᵀ sums over BLOCK_DK-wide slices of the head dim, Q's and K's slices read per key block
    (Q's come from L2 after the first);
  - the output is cut into BLOCK_DV-wide column slices, one program each: a program computes its
    queries' full scores and accumulates P·V[:, its slice].
With n = cdiv(D, BLOCK_DV) slices QKᵀ is computed n times, (n + 1) / 2 x the FLOPs of one pass.
Offsets within a head are 32-bit, or 64-bit where a head spans 2^31 elements or more (the
launcher decides); batch and head offsets are always 64-bit.

TMA (VARIANT = "tma", Hopper and newer): a second kernel for resident heads that moves Q, K, V
and O through the TMA unit. Each program builds four descriptors over its own (batch, head),
[S, D] with the head dim contiguous (`tl.make_tensor_descriptor`, on the device): TMA zero-fills
rows past S and columns past D on loads and drops them on stores, so the kernel has no load or
store masks; the sequence-end and causal masks stay on the scores of the diagonal and/or ragged
last block. The key loop runs in the same two parts as above; the unmasked part folds the scale
into one multiply-add per score (the row max is taken on raw scores and scaled, which needs
scale >= 0). No warp specialisation: Triton 3.6 splits such a loop on Hopper only at 4 warps,
crashes on two in a row, and the one-loop form it compiles returned NaN on an H200 at D = 64
and 128 (docs/benchmarks/flash-attention-h200-tma.md). Without it the variant ran at 0.85-1.04x
the tiled kernel's speed there (faster at S = 8192 and at D = 256, slower at S = 2048 and
D <= 128), so the default stays tiled. It
applies where TMA can address the call, and the launch plan falls back to the tiled kernel
otherwise (still correct): fp32 (ieee dots gain nothing from TMA), D over RESIDENT_HEAD_DIM, a
negative scale, a GPU before sm_90, or a tensor whose head dim is strided, whose batch, head or
row stride is not a multiple of 16 bytes (D = 100 in fp16, say; a dim of size 1 does not count)
or whose base address is off 16 bytes (a view at an odd offset). Any D <= 256 whose rows align
runs padded to a power of two (80 -> 128). Device-side descriptors live in global scratch
(128 bytes each, four per program), which Triton asks the allocator registered with
`triton.set_allocator` for at launch: the one allocation besides the output, GPU only. Triton
3.6's interpreter runs tensor descriptors (zero fill and clipped stores included), so on CPU the
tma variant runs its own kernel, bf16 dots upcast as below; its warp specialisation is a no-op
there.

Precision: QKᵀ and PV on tensor cores for fp16/bf16 with fp32 accumulation; the probabilities
are rounded to the input dtype before PV, as every FlashAttention does. fp32 inputs use ieee dots
(exact fp32; tf32 would miss fp32's tolerance). On CPU (the Triton interpreter, where bf16
`tl.dot` is wrong) the tiles are upcast to fp32 first, after the same rounding of the
probabilities, so the CPU result models the GPU's.

Tunables (the launcher clamps each, so every combination runs at every shape):
  BLOCK_M     queries per program; BLOCK_N keys per inner step. Both shrink to next_pow2(S)
              (minimum 16, tl.dot's smallest tile) for short sequences, and BLOCK_M halves while
              the accumulator would take over ACC_PER_THREAD fp32 registers per thread.
  BLOCK_DK    head-dim slice of the QKᵀ sum for heads over RESIDENT_HEAD_DIM.
  BLOCK_DV    output columns per program for heads over RESIDENT_HEAD_DIM.
  NUM_WARPS   warps per program.
  NUM_STAGES  pipeline depth of the K/V loads. The plan lowers it, then BLOCK_N, until the kernel
              fits the GPU's shared memory (the tma variant keeps two stages while BLOCK_N can
              halve: one TMA buffer would serialise loads and MMAs).
  VARIANT     "tiled" (pointer loads; any GPU, any head dim) or "tma" (above; falls back to
              "tiled" where it does not apply).

Host side: `_plan` turns shapes, strides, dtype, causal, scale and the tunables into a launch once
per key (lru_cache) and compiles it ahead (`warmup`); a call then only allocates the output and
launches the compiled kernel through `CompiledKernel[grid]`, Triton's cheapest public launch path.
Whether q, k and v start 16-byte aligned is part of the key under the tma variant (a data_ptr
check per tensor), and a tma launch first sets the descriptor allocator (a context variable).
"""

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "flash_attention"
BACKEND = "triton"

BLOCK_M = 128
BLOCK_N = 64
BLOCK_DK = 64
BLOCK_DV = 512
NUM_WARPS = 8
NUM_STAGES = 3
VARIANT = "tiled"

TUNABLE_SPACE = {
    "BLOCK_M": [16, 32, 64, 128],
    "BLOCK_N": [16, 32, 64, 128],
    "BLOCK_DK": [32, 64, 128],
    "BLOCK_DV": [64, 128, 256, 512, 1024],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [1, 2, 3, 4],
    "VARIANT": ["tiled", "tma"],
}

# The widest head dim kept whole in one program (Q resident, whole output rows accumulated).
RESIDENT_HEAD_DIM = 256
# fp32 accumulator elements per thread past which Triton spills the accumulator to local memory.
ACC_PER_THREAD = 128
# Element offsets within one head from here on need 64-bit arithmetic.
WIDE_OFFSET = 2**31
LOG2_E = 1.4426950408889634


@triton.jit
def _load_tile(base, rows, stride_row, num_rows, cols, stride_col, num_cols,
               CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr, WIDE_OFFSETS: tl.constexpr):
    """The tile base[rows, cols]; rows >= num_rows and cols >= num_cols read 0 where checked.
    Offsets are 32-bit unless WIDE_OFFSETS (a head too large for them)."""
    if WIDE_OFFSETS:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    ptrs = base + rows[:, None] * stride_row + cols[None, :] * stride_col
    if CHECK_ROWS:
        if CHECK_COLS:
            tile = tl.load(ptrs, mask=(rows[:, None] < num_rows) & (cols[None, :] < num_cols),
                           other=0.0)
        else:
            tile = tl.load(ptrs, mask=rows[:, None] < num_rows, other=0.0)
    else:
        if CHECK_COLS:
            tile = tl.load(ptrs, mask=cols[None, :] < num_cols, other=0.0)
        else:
            tile = tl.load(ptrs)
    return tile


@triton.jit
def _rescaled_plus_pv(acc, rescale, p, v, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """acc · rescale + P V for one key block, both kernels' online-softmax step. P is rounded to
    V's dtype first, the rounding a tensor-core PV product applies (UPCAST: then both go to fp32,
    for the interpreter's dots)."""
    p_in = p.to(v.dtype)
    if UPCAST:
        p_in = p_in.to(tl.float32)
        v = v.to(tl.float32)
    return tl.dot(p_in, v, acc * rescale[:, None], input_precision=DOT_PRECISION)


@triton.jit
def _scores(q, q_base, queries, stride_qs, stride_qd, k_base, keys, stride_ks, stride_kd,
            seq_len, CHECK_KEYS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_DK: tl.constexpr,
            DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, WIDE_OFFSETS: tl.constexpr):
    """Q Kᵀ of one key block (unscaled, fp32). With one BLOCK_DK slice spanning the head dim, `q`
    is the resident Q tile; otherwise both operands are read slice by slice."""
    if BLOCK_DK >= HEAD_DIM:
        k = _load_tile(k_base, keys, stride_ks, seq_len, tl.arange(0, BLOCK_DK), stride_kd,
                       HEAD_DIM, CHECK_KEYS, BLOCK_DK != HEAD_DIM, WIDE_OFFSETS)
        if UPCAST:
            k = k.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
    else:
        scores = tl.zeros((queries.shape[0], keys.shape[0]), dtype=tl.float32)
        for d in range(0, HEAD_DIM, BLOCK_DK):
            cols = d + tl.arange(0, BLOCK_DK)
            q_slice = _load_tile(q_base, queries, stride_qs, seq_len, cols, stride_qd, HEAD_DIM,
                                 True, HEAD_DIM % BLOCK_DK != 0, WIDE_OFFSETS)
            k_slice = _load_tile(k_base, keys, stride_ks, seq_len, cols, stride_kd, HEAD_DIM,
                                 CHECK_KEYS, HEAD_DIM % BLOCK_DK != 0, WIDE_OFFSETS)
            if UPCAST:
                q_slice = q_slice.to(tl.float32)
                k_slice = k_slice.to(tl.float32)
            scores = tl.dot(q_slice, tl.trans(k_slice), scores, input_precision=DOT_PRECISION)
    return scores


@triton.jit
def _attend_key_blocks(
    acc, row_max, row_sum, q, q_base, queries, stride_qs, stride_qd,
    k_base, v_base, stride_ks, stride_kd, stride_vs, stride_vd, v_cols,
    key_begin, key_end, seq_len, qk_scale,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr, DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr, WIDE_OFFSETS: tl.constexpr,
):
    """Fold keys [key_begin, key_end) into the online softmax state (acc, row_max, row_sum)."""
    for start in range(key_begin, key_end, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        scores = _scores(q, q_base, queries, stride_qs, stride_qd, k_base, keys, stride_ks,
                         stride_kd, seq_len, MASKED, HEAD_DIM, BLOCK_DK, DOT_PRECISION, UPCAST,
                         WIDE_OFFSETS)
        scores = scores * qk_scale
        if MASKED:
            visible = keys[None, :] < seq_len
            if CAUSAL:
                visible = visible & (keys[None, :] <= queries[:, None])
            scores = tl.where(visible, scores, float("-inf"))
        # Every row saw a visible key in its first block, so new_max is finite and the
        # exp2 of masked (-inf) scores is exactly 0.
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        rescale = tl.exp2(row_max - new_max)
        p = tl.exp2(scores - new_max[:, None])
        row_sum = row_sum * rescale + tl.sum(p, axis=1)
        v = _load_tile(v_base, keys, stride_vs, seq_len, v_cols, stride_vd, HEAD_DIM, MASKED,
                       HEAD_DIM % BLOCK_DV != 0, WIDE_OFFSETS)
        acc = _rescaled_plus_pv(acc, rescale, p, v, DOT_PRECISION, UPCAST)
        row_max = new_max
    return acc, row_max, row_sum


@triton.jit
def flash_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    stride_qb, stride_qh, stride_qs, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_ob, stride_oh, stride_os, stride_od,
    num_heads, seq_len, qk_scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, WIDE_OFFSETS: tl.constexpr,
):
    # Under torch.compile Inductor passes a Python float as fp64, which would make the online
    # softmax state (and acc) fp64; it stays fp32.
    qk_scale = tl.cast(qk_scale, tl.float32)
    # Program order: a query block's output slices side by side (they read the same Q and K
    # blocks, so the later ones find them in L2), query blocks last first, then heads.
    query_blocks = tl.cdiv(seq_len, BLOCK_M)
    slices = (HEAD_DIM + BLOCK_DV - 1) // BLOCK_DV
    pid = tl.program_id(0)
    first_col = (pid % slices) * BLOCK_DV
    query_block_index = pid // slices
    batch_head = query_block_index // query_blocks
    query_block = query_blocks - 1 - query_block_index % query_blocks
    batch = (batch_head // num_heads).to(tl.int64)
    head = (batch_head % num_heads).to(tl.int64)
    # Per-head base pointers; rows and columns below are offsets within one head.
    q_base = q_ptr + batch * stride_qb + head * stride_qh
    k_base = k_ptr + batch * stride_kb + head * stride_kh
    v_base = v_ptr + batch * stride_vb + head * stride_vh
    o_base = o_ptr + batch * stride_ob + head * stride_oh

    first_query = query_block * BLOCK_M
    queries = first_query + tl.arange(0, BLOCK_M)
    v_cols = first_col + tl.arange(0, BLOCK_DV)
    if BLOCK_DK >= HEAD_DIM:
        q = _load_tile(q_base, queries, stride_qs, seq_len, tl.arange(0, BLOCK_DK), stride_qd,
                       HEAD_DIM, True, BLOCK_DK != HEAD_DIM, WIDE_OFFSETS)
        if UPCAST:
            q = q.to(tl.float32)
    else:
        q = q_base  # no resident tile: _scores reads Q's slices through the pointer

    row_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    if CAUSAL:
        # Keys below first_query are visible to every query of the block (and in range).
        unmasked_end = (first_query // BLOCK_N) * BLOCK_N
        key_end = min(first_query + BLOCK_M, seq_len)
    else:
        unmasked_end = (seq_len // BLOCK_N) * BLOCK_N
        key_end = seq_len
    acc, row_max, row_sum = _attend_key_blocks(
        acc, row_max, row_sum, q, q_base, queries, stride_qs, stride_qd,
        k_base, v_base, stride_ks, stride_kd, stride_vs, stride_vd, v_cols,
        0, unmasked_end, seq_len, qk_scale,
        False, CAUSAL, HEAD_DIM, BLOCK_N, BLOCK_DK, BLOCK_DV, DOT_PRECISION, UPCAST, WIDE_OFFSETS,
    )
    acc, row_max, row_sum = _attend_key_blocks(
        acc, row_max, row_sum, q, q_base, queries, stride_qs, stride_qd,
        k_base, v_base, stride_ks, stride_kd, stride_vs, stride_vd, v_cols,
        unmasked_end, key_end, seq_len, qk_scale,
        True, CAUSAL, HEAD_DIM, BLOCK_N, BLOCK_DK, BLOCK_DV, DOT_PRECISION, UPCAST, WIDE_OFFSETS,
    )

    out = acc / row_sum[:, None]
    if WIDE_OFFSETS:
        queries = queries.to(tl.int64)
    o_ptrs = o_base + queries[:, None] * stride_os + v_cols[None, :] * stride_od
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty),
             mask=(queries[:, None] < seq_len) & (v_cols[None, :] < HEAD_DIM))


# ---------------------------------------------------------------------------------------------
# VARIANT = "tma": resident head dims on Hopper and newer; Q, K, V and O move through TMA.


@triton.jit
def _head_descriptor(ptr, batch, head, stride_b, stride_h, stride_s, seq_len,
                     HEAD_DIM: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    """A TMA descriptor over one head, [seq_len, HEAD_DIM] (the head dim contiguous), read and
    written BLOCK_ROWS x BLOCK_D at a time: the TMA unit zero-fills rows past seq_len and columns
    past HEAD_DIM on loads and drops them on stores, so neither needs a mask. Built on the device
    (the host checked the alignment TMA needs)."""
    return tl.make_tensor_descriptor(ptr + batch * stride_b + head * stride_h,
                                     [seq_len, HEAD_DIM], [stride_s, 1], [BLOCK_ROWS, BLOCK_D])


@triton.jit
def _masked_scores(scores, queries, keys, seq_len, qk_scale, CAUSAL: tl.constexpr):
    """Scaled scores with keys past seq_len (zero-filled by TMA) and, if causal, keys after
    the query at -inf."""
    visible = keys[None, :] < seq_len
    if CAUSAL:
        visible = visible & (keys[None, :] <= queries[:, None])
    return tl.where(visible, scores * qk_scale, float("-inf"))


@triton.jit
def _attend_key_blocks_tma(
    acc, row_max, row_sum, q, k_desc, v_desc, queries, key_begin, key_end, seq_len, qk_scale,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """Fold keys [key_begin, key_end) into the online softmax state, K and V tiles through TMA.
    MASKED applies the sequence-end and causal masks (all true in blocks that need none).
    key_begin is a multiple of BLOCK_N."""
    for start in tl.range(key_begin, key_end, BLOCK_N):
        start = tl.multiple_of(start, BLOCK_N)
        k = k_desc.load([start, 0])
        if UPCAST:
            k = k.to(tl.float32)
        scores = tl.dot(q, k.T, input_precision=DOT_PRECISION)
        keys = start + tl.arange(0, BLOCK_N)
        if MASKED:
            scores = _masked_scores(scores, queries, keys, seq_len, qk_scale, CAUSAL)
            new_max = tl.maximum(row_max, tl.max(scores, axis=1))
            p = tl.exp2(scores - new_max[:, None])
        else:
            # No mask: the scale folds into one multiply-add per score (qk_scale >= 0, so the
            # row max of the raw scores, scaled, is the max of the scaled ones).
            new_max = tl.maximum(row_max, tl.max(scores, axis=1) * qk_scale)
            p = tl.exp2(scores * qk_scale - new_max[:, None])
        rescale = tl.exp2(row_max - new_max)
        row_sum = row_sum * rescale + tl.sum(p, axis=1)
        v = v_desc.load([start, 0])
        acc = _rescaled_plus_pv(acc, rescale, p, v, DOT_PRECISION, UPCAST)
        row_max = new_max
    return acc, row_max, row_sum


@triton.jit
def flash_attention_tma_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    num_heads, seq_len, qk_scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    qk_scale = tl.cast(qk_scale, tl.float32)  # fp32 even when Inductor passes an fp64
    # Program order as in the tiled kernel: query blocks last (heaviest under causal) first.
    query_blocks = tl.cdiv(seq_len, BLOCK_M)
    pid = tl.program_id(0)
    batch_head = pid // query_blocks
    query_block = query_blocks - 1 - pid % query_blocks
    batch = (batch_head // num_heads).to(tl.int64)
    head = (batch_head % num_heads).to(tl.int64)
    q_desc = _head_descriptor(q_ptr, batch, head, stride_qb, stride_qh, stride_qs, seq_len,
                              HEAD_DIM, BLOCK_M, BLOCK_D)
    k_desc = _head_descriptor(k_ptr, batch, head, stride_kb, stride_kh, stride_ks, seq_len,
                              HEAD_DIM, BLOCK_N, BLOCK_D)
    v_desc = _head_descriptor(v_ptr, batch, head, stride_vb, stride_vh, stride_vs, seq_len,
                              HEAD_DIM, BLOCK_N, BLOCK_D)
    o_desc = _head_descriptor(o_ptr, batch, head, stride_ob, stride_oh, stride_os, seq_len,
                              HEAD_DIM, BLOCK_M, BLOCK_D)

    first_query = query_block * BLOCK_M
    queries = first_query + tl.arange(0, BLOCK_M)
    q = q_desc.load([first_query, 0])
    if UPCAST:
        q = q.to(tl.float32)
    row_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    if CAUSAL:
        unmasked_end = (first_query // BLOCK_N) * BLOCK_N
        key_end = min(first_query + BLOCK_M, seq_len)
    else:
        unmasked_end = (seq_len // BLOCK_N) * BLOCK_N
        key_end = seq_len
    # Off-diagonal blocks without masks, then the diagonal and/or ragged last block with them
    # (two loops, so the hot one carries no mask arithmetic, not even a branch).
    acc, row_max, row_sum = _attend_key_blocks_tma(
        acc, row_max, row_sum, q, k_desc, v_desc, queries, 0, unmasked_end, seq_len, qk_scale,
        False, CAUSAL, BLOCK_N, DOT_PRECISION, UPCAST,
    )
    acc, row_max, row_sum = _attend_key_blocks_tma(
        acc, row_max, row_sum, q, k_desc, v_desc, queries, unmasked_end, key_end, seq_len,
        qk_scale, True, CAUSAL, BLOCK_N, DOT_PRECISION, UPCAST,
    )
    out = acc / row_sum[:, None]
    o_desc.store([first_query, 0], out.to(o_ptr.dtype.element_ty))  # rows past seq_len dropped


@functools.cache
def _shared_memory_bytes(device_index: int) -> int:
    props = torch.cuda.get_device_properties(device_index)
    return int(getattr(props, "shared_memory_per_block_optin", props.shared_memory_per_block))


def _block(requested: int, dim: int) -> int:
    """A block no larger than the dim needs (next power of two), and at least tl.dot's 16."""
    return max(16, min(requested, triton.next_power_of_2(dim)))


def _estimated_fit(block_m: int, block_n: int, block_dk: int, block_dv: int, resident: bool,
                   num_stages: int, element_size: int, device: int, min_stages: int = 1
                   ) -> tuple[int, int]:
    """(BLOCK_N, stages) whose buffers fit in the shared memory of CUDA device `device` (-1: CPU).
    Held once: the probabilities fed to PV, and the Q tile if resident (else the V tile, loaded
    outside the pipelined slice loop); per stage: a K and a V tile if resident, else a Q and a K
    slice. BLOCK_N halves first if even `min_stages` stages cannot fit."""
    if device < 0:
        return block_n, num_stages  # the interpreter has no shared memory
    budget = _shared_memory_bytes(device)

    def held(bn: int) -> int:
        return (block_m * bn + (block_m * block_dk if resident else bn * block_dv)) * element_size

    def per_stage(bn: int) -> int:
        return (2 * bn * block_dk if resident else (block_m + bn) * block_dk) * element_size

    while block_n > 16 and held(block_n) + min_stages * per_stage(block_n) > budget:
        block_n //= 2
    return block_n, max(1, min(num_stages, (budget - held(block_n)) // per_stage(block_n)))


class Launch(NamedTuple):
    """A planned launch: the kernel, its grid, every argument after the leading tensors (strides,
    sizes, scalars, constexprs, in signature order), its options, and the kernel compiled for
    them (None under the interpreter, which compiles nothing)."""

    kernel: Any
    grid: tuple[int, int, int]
    args: tuple[Any, ...]
    options: dict[str, int]
    compiled: Any
    tma: bool = False  # the tma kernel: its descriptors need scratch from the allocator


def _compile(kernel: Any, grid: tuple[int, int, int], tensor_dtypes: tuple[torch.dtype, ...],
             args: tuple[Any, ...], tma: bool = False, **options: int) -> Launch:
    """Compile `kernel` ahead for tensors of `tensor_dtypes` followed by `args`.

    Triton specializes a compiled kernel on its integer arguments (equal to 1, divisible by 16)
    and on each pointer's 16-byte alignment. Warming up with dtypes in place of tensors compiles
    the aligned-pointer variant, and `args` are the very values every launch of the plan passes.
    The interpreter's warm-up compiles nothing (None), as does a kernel without one.
    """
    warmup = getattr(kernel, "warmup", None)
    if tma:
        triton.set_allocator(_descriptor_scratch)  # warmup only compiles, but set it as a launch
    compiled = None if warmup is None else warmup(*tensor_dtypes, *args, grid=grid, **options)
    return Launch(kernel, grid, args, options, compiled, tma)


def _descriptor_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Global memory Triton asks for at launch, where the tma kernel's programs write their TMA
    descriptors (128 bytes each, four per program)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _launch(launch: Launch, *tensors: torch.Tensor) -> None:
    """Launch on `tensors` (the kernel's leading pointer arguments). Straight through the compiled
    kernel when every pointer is 16-byte aligned, as it was compiled for and as every fresh
    allocation is; a view at an odd offset goes through Triton's JIT, which specializes on it
    (only ever the tiled kernel: `_plan` gives such views no tma launch)."""
    if launch.tma:
        # Device-side descriptors need the scratch above; the allocator is a context variable
        # (per thread), cheap to set before each launch.
        triton.set_allocator(_descriptor_scratch)
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


def _fitting_launch(kernel: Any, grid: tuple[int, int, int], tensor_dtypes: tuple[torch.dtype, ...],
                    args: Callable[[int], tuple[Any, ...]], block_n: int, num_stages: int,
                    num_warps: int, tma: bool = False) -> Launch:
    """The launch compiled with args(block_n) and num_stages, shrinking the pipeline and then
    BLOCK_N while the compiled kernel needs more shared memory than the GPU has (loading it,
    which indexing it does, raises OutOfResources then). The estimate that picked the starting
    point leaves out Triton's layout-conversion buffers, so this is rare."""
    while True:
        launch = _compile(kernel, grid, tensor_dtypes, args(block_n), tma, num_warps=num_warps,
                          num_stages=num_stages)
        try:
            if launch.compiled is not None:
                launch.compiled[grid]  # loads the kernel, not a launch
            return launch
        except triton.runtime.errors.OutOfResources:
            if num_stages > 1:
                num_stages -= 1
            elif block_n > 16:
                block_n //= 2
            else:
                raise


@functools.cache
def _has_tma(device: int) -> bool:
    """Whether tensor descriptors work on CUDA device `device`: sm_90 and newer. The interpreter
    (device -1, CPU tensors) runs them with numpy, zero fill and clipped stores included."""
    return device < 0 or torch.cuda.get_device_capability(device) >= (9, 0)


def _tma_strides(shape: tuple[int, ...], strides: tuple[tuple[int, ...], ...], dtype: torch.dtype,
                 scale: float | None, device: int, aligned: bool) -> tuple[int, ...] | None:
    """The (batch, head, row) strides of q, k, v and the output that the tma kernel's per-head
    descriptors take, or None where the call runs the tiled kernel instead:
      - VARIANT "tiled", or a GPU older than sm_90 (no TMA unit);
      - fp32 (the variant is for tensor-core dtypes; fp32's ieee dots gain nothing from TMA);
      - head dims over RESIDENT_HEAD_DIM (the tiled kernel slices those);
      - a negative scale (the unmasked loop scales the raw row max, which needs scale >= 0);
      - a tensor TMA cannot address: its head dim strided, a batch, head or row stride (in
        bytes) not a multiple of 16, or a base address off 16 bytes (`aligned`).
    A dim of size 1 is only ever indexed at 0: its stride becomes a placeholder that TMA
    accepts, whatever the tensor's own (a [1, H, S, D] view's batch stride, say)."""
    if (VARIANT != "tma" or dtype not in (torch.float16, torch.bfloat16) or not aligned
            or shape[3] > RESIDENT_HEAD_DIM or (scale is not None and scale < 0)
            or not _has_tma(device)):
        return None
    elements = 16 // dtype.itemsize
    placeholder = elements * triton.cdiv(shape[3], elements)
    found: list[int] = []
    for tensor_strides in strides:
        if tensor_strides[3] != 1 and shape[3] != 1:
            return None
        for size, stride in zip(shape[:3], tensor_strides[:3]):
            if size == 1:
                stride = placeholder
            elif stride % elements:
                return None
            found.append(stride)
    return tuple(found)


@functools.lru_cache(maxsize=1024)
def _plan(
    q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...],
    q_strides: tuple[int, ...], k_strides: tuple[int, ...], v_strides: tuple[int, ...],
    dtypes: tuple[torch.dtype, ...], causal: bool, scale: float | None, device: int,
    aligned: bool = True,
) -> Launch | None:
    """The launch the tunables give for these inputs (the output contiguous): the one place where
    tunables become a launch; raises ValueError for inputs that do not fit together. Cached by
    its arguments, which are plain values, so a call pays a dictionary lookup; `device` (the
    current CUDA device, -1 for CPU tensors) is part of the key because a compiled kernel is
    loaded on one device, and a GPU's shared memory bounds the pipeline. `aligned`: q, k and v
    start at 16-byte aligned addresses (TMA needs it). None for empty inputs."""
    if len(q_shape) != 4 or q_shape != k_shape or q_shape != v_shape:
        raise ValueError(f"flash_attention needs q, k, v of one shape [B, H, S, D]; got "
                         f"{tuple(q_shape)}, {tuple(k_shape)}, {tuple(v_shape)}")
    dtype = dtypes[0]
    if any(d != dtype for d in dtypes):
        raise ValueError("q, k and v must share a dtype")
    batch, heads, seq_len, head_dim = q_shape
    if batch * heads * seq_len * head_dim == 0:
        return None  # nothing to compute
    upcast = device < 0  # CPU tensors only ever run in the interpreter
    precision = "ieee" if dtype == torch.float32 or upcast else "tf32"
    qk_scale = (1.0 / math.sqrt(head_dim) if scale is None else float(scale)) * LOG2_E

    resident = head_dim <= RESIDENT_HEAD_DIM
    if resident:
        block_dk = block_dv = max(16, triton.next_power_of_2(head_dim))
    else:
        block_dk = _block(BLOCK_DK, head_dim)
        block_dv = _block(BLOCK_DV, head_dim)
    block_m = _block(BLOCK_M, seq_len)
    while block_m > 16 and block_m * block_dv > ACC_PER_THREAD * 32 * NUM_WARPS:
        block_m //= 2
    out_strides = (heads * seq_len * head_dim, seq_len * head_dim, head_dim, 1)
    tma_strides = _tma_strides(q_shape, (q_strides, k_strides, v_strides, out_strides), dtype,
                               scale, device, aligned)
    if tma_strides is not None:
        block_n, num_stages = _estimated_fit(block_m, _block(BLOCK_N, seq_len), block_dk,
                                             block_dv, True, NUM_STAGES, dtype.itemsize, device,
                                             min_stages=min(2, NUM_STAGES))

        def tma_args(block_n: int) -> tuple[Any, ...]:
            return (*tma_strides, heads, seq_len, qk_scale, bool(causal), head_dim, block_m,
                    block_n, block_dk, precision, upcast)

        return _fitting_launch(flash_attention_tma_kernel,
                               (triton.cdiv(seq_len, block_m) * batch * heads, 1, 1),
                               (dtype,) * 4, tma_args, block_n, num_stages, NUM_WARPS, tma=True)

    block_n, num_stages = _estimated_fit(block_m, _block(BLOCK_N, seq_len), block_dk, block_dv,
                                         resident, NUM_STAGES, dtype.itemsize, device)
    slices = triton.cdiv(head_dim, block_dv)
    grid = (triton.cdiv(seq_len, block_m) * batch * heads * slices, 1, 1)

    furthest = max((seq_len - 1) * strides[2] + (head_dim - 1) * strides[3]
                   for strides in (q_strides, k_strides, v_strides, out_strides))
    wide_offsets = furthest >= WIDE_OFFSET

    def args(block_n: int) -> tuple[Any, ...]:
        return (*q_strides, *k_strides, *v_strides, *out_strides, heads, seq_len, qk_scale,
                bool(causal), head_dim, block_m, block_n, block_dk, block_dv, precision, upcast,
                wide_offsets)

    return _fitting_launch(flash_attention_kernel, grid, (dtype,) * 4, args, block_n, num_stages,
                           NUM_WARPS)


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
    scale: float | None = None,
) -> torch.Tensor:
    device = torch.cuda.current_device() if q.is_cuda else -1
    launch = _plan(q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(),
                   (q.dtype, k.dtype, v.dtype), bool(causal), scale, device,
                   VARIANT != "tma" or _aligned((q, k, v)))
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if launch is not None:
        _launch(launch, q, k, v, out)
    return out


def kernel_fn(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention output in q's dtype (fp32 online softmax)."""
    return flash_attention(q, k, v, causal, scale)
