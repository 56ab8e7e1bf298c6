"""Triton starter: fused_mlp, the gated MLP out = (act(x W_gateᵀ) * (x W_upᵀ)) W_downᵀ.

x [M, D]; w_gate, w_up [H, D]; w_down [D, H] (nn.Linear layouts); out [M, D]. act is the
`activation` argument: "silu" (SwiGLU, the default), "gelu" (GeGLU, exact erf GELU) or
"gelu_tanh" (GeGLU, GELU's tanh form).

Algorithm, two kernels:
  1. gate_up_kernel: each program owns a GATE_BLOCK_M x GATE_BLOCK_H tile of the hidden
     activation and walks D in GATE_BLOCK_K steps, feeding ONE x tile to two dots (gate and up,
     two float32 accumulators), so x is read once for both projections. The epilogue applies
     act(gate) * up in float32 and stores hidden [M, H] in x's dtype, the rounding the
     reference applies before the down projection. act is a constexpr (one compiled variant
     per activation), each written to saturate rather than overflow to NaN:
       silu(g)      = g / (1 + exp(-g))
       gelu(g)      = 0.5·g·(1 + erf(g/√2))          (tl.math.erf, which the interpreter runs)
       gelu_tanh(g) = g / (1 + exp(-2u)), u = √(2/π)·(g + 0.044715·g³)
     the last is 0.5·g·(1 + tanh(u)) with tanh written through exp as autokernel/kernels/gelu.py
     does, minus the 1 + tanh(u) cancellation in the negative tail.
  2. down_kernel: out = hidden @ W_downᵀ, a tiled GEMM reading W_down through its strides (no
     transposed copy), float32 accumulation, one cast at the end.
Both number their programs in groups of GROUP_M row-tiles (L2 swizzle) so the weight tiles a
group sweeps stay in L2. Deterministic: every output element is reduced by one program, in order.

Precision: fp16/bf16 dots on tensor cores with fp32 accumulation; fp32 inputs use FP32_PRECISION
("ieee" exact FMA dots, or "tf32x3", about fp32 accuracy); plain tf32 is not offered, it would
miss fp32's tolerance. On CPU (the Triton interpreter, where bf16 `tl.dot` is wrong) tiles are
upcast to fp32 before each dot.

Tunables (GATE_* for kernel 1, DOWN_* for kernel 2):
  *_BLOCK_M, GATE_BLOCK_H, DOWN_BLOCK_N, *_BLOCK_K  tile sizes; the launcher shrinks a block to
      next_pow2 of a small dim (minimum 16, tl.dot's smallest tile).
  *_NUM_WARPS, *_NUM_STAGES  warps per program; K-loop pipeline depth. The launcher lowers
      NUM_STAGES, then BLOCK_K, until the kernel fits the GPU's shared memory, so every
      combination runs.
  GROUP_M  row-tiles per L2 group (1 = plain row-major order), both kernels.
  FP32_PRECISION  dot precision for fp32 inputs, both kernels.

Host side: `_plan` turns shapes, strides, dtypes and the tunables into launches once per key
(lru_cache) and compiles them ahead (`warmup`); a call then only allocates hidden and out and
launches the two compiled kernels through `CompiledKernel[grid]`, Triton's cheapest public launch
path.
"""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "fused_mlp"
BACKEND = "triton"

GATE_BLOCK_M = 128
GATE_BLOCK_H = 128
GATE_BLOCK_K = 64
GATE_NUM_WARPS = 8
GATE_NUM_STAGES = 3
DOWN_BLOCK_M = 128
DOWN_BLOCK_N = 128
DOWN_BLOCK_K = 64
DOWN_NUM_WARPS = 8
DOWN_NUM_STAGES = 3
GROUP_M = 8
FP32_PRECISION = "ieee"
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")

TUNABLE_SPACE = {
    "GATE_BLOCK_M": [16, 32, 64, 128],
    "GATE_BLOCK_H": [32, 64, 128],
    "GATE_BLOCK_K": [32, 64, 128],
    "GATE_NUM_WARPS": [4, 8],
    "GATE_NUM_STAGES": [2, 3, 4, 5],
    "DOWN_BLOCK_M": [16, 32, 64, 128],
    "DOWN_BLOCK_N": [32, 64, 128, 256],
    "DOWN_BLOCK_K": [32, 64, 128],
    "DOWN_NUM_WARPS": [4, 8],
    "DOWN_NUM_STAGES": [2, 3, 4, 5],
    "GROUP_M": [1, 4, 8, 16],
    "FP32_PRECISION": ["ieee", "tf32x3"],
}


@triton.jit
def _grouped_tile(pid, num_tiles_m, num_tiles_n, GROUP_M: tl.constexpr):
    """Map a linear program id to (row-tile, column-tile), GROUP_M row-tiles at a time."""
    tiles_per_group = GROUP_M * num_tiles_n
    group = pid // tiles_per_group
    first_row_tile = group * GROUP_M
    rows_in_group = min(num_tiles_m - first_row_tile, GROUP_M)
    within = pid % tiles_per_group
    return first_row_tile + within % rows_in_group, within // rows_in_group


@triton.jit
def gate_up_kernel(
    x_ptr, w_gate_ptr, w_up_ptr, hidden_ptr,
    M, H, D,
    stride_xm, stride_xd,
    stride_gh, stride_gd,
    stride_uh, stride_ud,
    stride_hm, stride_hh,
    BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    ACTIVATION: tl.constexpr,
):
    tile_m, tile_h = _grouped_tile(
        tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(H, BLOCK_H), GROUP_M
    )
    # Out-of-range rows/hidden units wrap back in range: loads stay valid without masks and
    # the store drops their results.
    rows = ((tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M).to(tl.int64)
    units = ((tile_h * BLOCK_H + tl.arange(0, BLOCK_H)) % H).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xd
    # Weights are [H, D]; read [BLOCK_K, BLOCK_H] tiles of their transposes through the strides.
    gate_ptrs = w_gate_ptr + ks[:, None] * stride_gd + units[None, :] * stride_gh
    up_ptrs = w_up_ptr + ks[:, None] * stride_ud + units[None, :] * stride_uh

    gate = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.float32)
    for k in range(0, D, BLOCK_K):
        if EVEN_K:
            x = tl.load(x_ptrs)
            w_gate = tl.load(gate_ptrs)
            w_up = tl.load(up_ptrs)
        else:
            k_in_range = (k + ks) < D
            x = tl.load(x_ptrs, mask=k_in_range[None, :], other=0.0)
            w_gate = tl.load(gate_ptrs, mask=k_in_range[:, None], other=0.0)
            w_up = tl.load(up_ptrs, mask=k_in_range[:, None], other=0.0)
        if UPCAST:
            x = x.to(tl.float32)
            w_gate = w_gate.to(tl.float32)
            w_up = w_up.to(tl.float32)
        gate = tl.dot(x, w_gate, gate, input_precision=DOT_PRECISION)
        up = tl.dot(x, w_up, up, input_precision=DOT_PRECISION)
        x_ptrs += BLOCK_K * stride_xd
        gate_ptrs += BLOCK_K * stride_gd
        up_ptrs += BLOCK_K * stride_ud

    if ACTIVATION == "gelu":
        activated = 0.5 * gate * (1.0 + tl.math.erf(gate * 0.7071067811865476))  # erf(g/√2)
    elif ACTIVATION == "gelu_tanh":
        # √(2/π)·(g + 0.044715·g³), doubled: exp(-2u) overflows to inf far below 0 (giving -0)
        # and underflows to 0 far above (giving g), the right limits.
        two_u = 1.5957691216057308 * (gate + 0.044715 * gate * gate * gate)
        activated = gate / (1.0 + tl.exp(-two_u))
    else:
        # silu(g) = g / (1 + exp(-g)): exp overflowing to inf for g < -88 gives -0, the limit.
        activated = gate / (1.0 + tl.exp(-gate))
    hidden = activated * up
    out_rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_units = tile_h * BLOCK_H + tl.arange(0, BLOCK_H)
    hidden_ptrs = (
        hidden_ptr + out_rows.to(tl.int64)[:, None] * stride_hm + out_units[None, :] * stride_hh
    )
    in_bounds = (out_rows[:, None] < M) & (out_units[None, :] < H)
    tl.store(hidden_ptrs, hidden.to(hidden_ptr.dtype.element_ty), mask=in_bounds)


@triton.jit
def down_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """C[M, N] = A[M, K] @ B[K, N]; here A = hidden, B = W_downᵀ (a strided view), C = out."""
    tile_m, tile_n = _grouped_tile(
        tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M
    )
    rows = ((tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M).to(tl.int64)
    cols = ((tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_in_range = (k + ks) < K
            a = tl.load(a_ptrs, mask=k_in_range[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_in_range[:, None], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    out_rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + out_rows.to(tl.int64)[:, None] * stride_cm + out_cols[None, :] * stride_cn
    in_bounds = (out_rows[:, None] < M) & (out_cols[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=in_bounds)


@functools.cache
def _shared_memory_bytes(device_index: int) -> int:
    props = torch.cuda.get_device_properties(device_index)
    return int(getattr(props, "shared_memory_per_block_optin", props.shared_memory_per_block))


def _block(requested: int, dim: int) -> int:
    """A block no larger than the dim needs (next power of two), and at least tl.dot's 16."""
    return max(16, min(requested, triton.next_power_of_2(dim)))


def _estimated_fit(block_k: int, num_stages: int, bytes_per_k: int, device: int
                   ) -> tuple[int, int]:
    """(BLOCK_K, stages) whose operand buffers, stages x bytes_per_k x BLOCK_K, fit in shared
    memory of CUDA device `device` (-1: CPU): BLOCK_K halves first if even one stage cannot
    fit."""
    if device < 0:
        return block_k, num_stages  # the interpreter has no shared memory
    budget = _shared_memory_bytes(device)
    while block_k > 16 and bytes_per_k * block_k > budget:
        block_k //= 2
    return block_k, max(1, min(num_stages, budget // (bytes_per_k * block_k)))


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


def _fitting_launch(kernel: Any, grid: tuple[int, int, int], tensor_dtypes: tuple[torch.dtype, ...],
                    args: Callable[[int], tuple[Any, ...]], block_k: int, num_stages: int,
                    num_warps: int) -> Launch:
    """The launch compiled with args(block_k) and num_stages, shrinking the pipeline and then
    BLOCK_K while the compiled kernel needs more shared memory than the GPU has (loading it,
    which indexing it does, raises OutOfResources then). The estimate that picked the starting
    point leaves out Triton's epilogue and operand-conversion buffers, so this is rare."""
    while True:
        launch = _compile(kernel, grid, tensor_dtypes, args(block_k), num_warps=num_warps,
                          num_stages=num_stages)
        try:
            if launch.compiled is not None:
                launch.compiled[grid]  # loads the kernel, not a launch
            return launch
        except triton.runtime.errors.OutOfResources:
            if num_stages > 1:
                num_stages -= 1
            elif block_k > 16:
                block_k //= 2
            else:
                raise


@functools.lru_cache(maxsize=1024)
def _plan(
    x_shape: tuple[int, ...], x_strides: tuple[int, ...],
    gate_shape: tuple[int, ...], gate_strides: tuple[int, ...],
    up_shape: tuple[int, ...], up_strides: tuple[int, ...],
    down_shape: tuple[int, ...], down_strides: tuple[int, ...],
    dtypes: tuple[torch.dtype, ...], device: int, activation: str = "silu",
) -> tuple[Launch, Launch]:
    """The two launches (gate_up, down) the tunables give for these operands (hidden and out
    contiguous); raises ValueError for operands that do not fit together. Cached by its
    arguments, which are plain values, so a call pays a dictionary lookup; `device` (the current
    CUDA device, -1 for CPU tensors) is part of the key because a compiled kernel is loaded on
    one device, and a GPU's shared memory bounds the pipeline."""
    if len(x_shape) != 2 or len(gate_shape) != 2 or gate_shape != up_shape or \
            gate_shape[1] != x_shape[1] or tuple(down_shape) != (x_shape[1], gate_shape[0]):
        raise ValueError(
            "fused_mlp needs x[M, D], w_gate[H, D], w_up[H, D], w_down[D, H]; got "
            f"{tuple(x_shape)}, {tuple(gate_shape)}, {tuple(up_shape)}, {tuple(down_shape)}"
        )
    dtype = dtypes[0]
    if any(d != dtype for d in dtypes):
        raise ValueError("x and the three weights must share a dtype")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r}: choose one of {', '.join(ACTIVATIONS)}")
    m, d = x_shape
    h = gate_shape[0]
    upcast = device < 0  # CPU tensors only ever run in the interpreter
    precision = FP32_PRECISION if dtype == torch.float32 else "ieee" if upcast else "tf32"
    size = dtype.itemsize

    gate_m, gate_h = _block(GATE_BLOCK_M, m), _block(GATE_BLOCK_H, h)
    # One stage holds an x tile and two weight tiles.
    block_k, num_stages = _estimated_fit(
        _block(GATE_BLOCK_K, d), GATE_NUM_STAGES, (gate_m + 2 * gate_h) * size, device
    )
    gate_up = _fitting_launch(
        gate_up_kernel, (triton.cdiv(m, gate_m) * triton.cdiv(h, gate_h), 1, 1), (dtype,) * 4,
        # hidden [m, h] is contiguous: strides (h, 1).
        lambda block_k: (m, h, d, *x_strides, *gate_strides, *up_strides, h, 1,
                         gate_m, gate_h, block_k, GROUP_M, d % block_k == 0, precision, upcast,
                         activation),
        block_k, num_stages, GATE_NUM_WARPS,
    )

    down_m, down_n = _block(DOWN_BLOCK_M, m), _block(DOWN_BLOCK_N, d)
    block_k, num_stages = _estimated_fit(
        _block(DOWN_BLOCK_K, h), DOWN_NUM_STAGES, (down_m + down_n) * size, device
    )
    down = _fitting_launch(
        down_kernel, (triton.cdiv(m, down_m) * triton.cdiv(d, down_n), 1, 1), (dtype,) * 3,
        # A = hidden (h, 1); B = W_downᵀ: B[k, n] = w_down[n, k]; out [m, d] contiguous: (d, 1).
        lambda block_k: (m, d, h, h, 1, down_strides[1], down_strides[0], d, 1,
                         down_m, down_n, block_k, GROUP_M, h % block_k == 0, precision, upcast),
        block_k, num_stages, DOWN_NUM_WARPS,
    )
    return gate_up, down


def fused_mlp(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
    activation: str = "silu",
) -> torch.Tensor:
    device = torch.cuda.current_device() if x.is_cuda else -1
    gate_up, down = _plan(
        x.shape, x.stride(), w_gate.shape, w_gate.stride(), w_up.shape, w_up.stride(),
        w_down.shape, w_down.stride(), (x.dtype, w_gate.dtype, w_up.dtype, w_down.dtype), device,
        activation,
    )
    m, d = x.shape
    hidden = torch.empty((m, w_gate.shape[0]), dtype=x.dtype, device=x.device)
    out = torch.empty((m, d), dtype=x.dtype, device=x.device)
    _launch(gate_up, x, w_gate, w_up, hidden)
    _launch(down, hidden, w_down, out)
    return out


def kernel_fn(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
    activation: str = "silu",
) -> torch.Tensor:
    """Gated MLP (SwiGLU, or GeGLU with activation "gelu"/"gelu_tanh") in x's dtype (fp32
    accumulation, hidden rounded to x's dtype)."""
    return fused_mlp(x, w_gate, w_up, w_down, activation)
