"""matmul: C[M, N] = A[M, K] @ B[K, N]. Shapes are written M x N x K.

Inputs are scaled like a linear layer's: A is the activation (unit scale), B the weight divided
by sqrt(K) (its fan-in, as nn.Linear's init does), so C stays O(1) at every K. That keeps the
fp32 tolerance at the default 1e-4: a correct fp32 accumulation over K terms of size 1/sqrt(K)
has an absolute error of about 2^-24 * sqrt(K), far below 1e-4 even at K = 16384, so no
K-dependent relaxation is needed. (Unscaled inputs would make |C| ~ sqrt(K) and push elements
that nearly cancel past any fixed atol, for cuBLAS as much as for a candidate.)
"""

from __future__ import annotations

import math
from typing import Any

import torch

from autokernel import reference
from autokernel.ops.spec import (
    DEFAULT_TOLERANCES,
    AdversarialCase,
    Inputs,
    OpSpec,
    Shape,
    element_size,
    sample,
)

# "large" multiplies the activation A by this (B keeps its fan-in scale), so |C| ~ 32 and up to
# ~200 in fp16/bf16. fp32 gets a smaller scale: a correct fp32 accumulation carries about
# |C| * 2^-24 * sqrt(K) absolute error, and at |C| ~ 32, K >= 4096 that is ~1.2e-4, past
# atol=1e-4 on the elements that nearly cancel. Seen on an H200 (ieee dots, 4096^3: 74 of 16.7M
# elements off by ~1.5e-4); the CPU interpreter's numpy dot sums more accurately and hid it.
LARGE_SCALE = 32.0
FP32_LARGE_SCALE = 4.0


def _operands(
    m: int,
    n: int,
    k: int,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A[m, k] and B[k, n] drawn in float32 (B scaled by 1/sqrt(k)), both cast to `dtype`."""
    scale = FP32_LARGE_SCALE if dtype == torch.float32 else LARGE_SCALE
    a = sample((m, k), torch.float32, device, generator, distribution, large_scale=scale)
    b = sample((k, n), torch.float32, device, generator, distribution, large_scale=1.0)
    return a.to(dtype), (b / math.sqrt(k)).to(dtype)


def make_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
    **params: Any,
) -> Inputs:
    if params:
        raise ValueError(f"matmul takes no parameters; got {', '.join(sorted(params))}")
    m, n, k = shape
    return _operands(m, n, k, dtype, device, generator, distribution)


def _wide_dynamic_range(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    m, n, k = shape
    a, b = _operands(m, n, k, torch.float32, device, generator, "normal")
    # Rows span 1e-3..1e2 (1e-3..FP32_LARGE_SCALE in fp32, for the reason given there).
    top = FP32_LARGE_SCALE if dtype == torch.float32 else 100.0
    row_scale = torch.logspace(-3, math.log10(top), m, device=device, dtype=torch.float32)
    return (a * row_scale[:, None]).to(dtype), b.to(dtype)


def _k_equals_one(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    m, n, _ = shape
    return _operands(m, n, 1, dtype, device, generator, "normal")


def _tall_skinny(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    m, _, k = shape
    return _operands(4 * m, 3, k, dtype, device, generator, "normal")


def _common_offset(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    m, n, k = shape
    a, b = _operands(m, n, k, torch.float32, device, generator, "normal")
    # Every column of B sums to ~0, so offset * colsum(B) cancels and C stays O(1) while the
    # running partial sums reach ~offset: fp16/bf16 accumulation is off by 10-100x the
    # tolerance at 32. fp32 uses FP32_LARGE_SCALE, for the reason given there (an H200 at
    # 4096^3 put 2110 elements of a correct ieee kernel past 1e-4 at 32); a tf32 or
    # half-precision shortcut still misses by ~20x there.
    offset = FP32_LARGE_SCALE if dtype == torch.float32 else 32.0
    b = b - b.mean(dim=0, keepdim=True)
    return (a + offset).to(dtype), b.to(dtype)


def _transposed_b(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal", **params: Any,
) -> Inputs:
    m, n, k = shape
    a, b = _operands(m, n, k, dtype, device, generator, "normal")
    # x @ weight.t(): B arrives as a column-major view, strides (1, K).
    return a, b.t().contiguous().t()


ADVERSARIAL = (
    AdversarialCase(
        "wide_dynamic_range",
        "rows of A scaled log-uniformly from 1e-3 to 1e2: breaks kernels that lose small rows "
        "(low-precision accumulation, a global scale) or overflow large ones",
        _wide_dynamic_range,
    ),
    AdversarialCase(
        "k_equals_one",
        "K = 1 (an outer product): one partial K tile that is almost all mask",
        _k_equals_one,
    ),
    AdversarialCase(
        "tall_skinny",
        "4M x 3 output: N far below any BLOCK_N, M spanning many row blocks",
        _tall_skinny,
    ),
    AdversarialCase(
        "common_offset",
        "A = 32 + noise (4 + noise in fp32) against zero-mean columns of B: C is O(1) but the "
        "partial sums are ~32, so a fp16/bf16 accumulator loses the answer to cancellation",
        _common_offset,
    ),
    AdversarialCase(
        "transposed_b",
        "B is a column-major view (x @ weight.t()): breaks kernels that assume contiguous B",
        _transposed_b,
    ),
)


def flops(shape: Shape) -> float:
    # One multiply and one add per (m, n, k) triple.
    m, n, k = shape
    return 2.0 * m * n * k


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    # A and B read once, C written once.
    m, n, k = shape
    return float(m * k + k * n + m * n) * element_size(dtype)


SPEC = OpSpec(
    name="matmul",
    dims=("M", "N", "K"),
    reference=reference.matmul,
    stock=torch.matmul,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=True,
    smoke_shape=(64, 48, 40),
    sweep=(
        (4096, 4096, 4096),
        (8192, 8192, 8192),
        (4096, 11008, 4096),   # LLaMA-7B up/gate projection, 4096 tokens
        (4096, 4096, 11008),   # LLaMA-7B down projection
        (1024, 4096, 4096),
        (16, 4096, 4096),      # decode: a handful of tokens
        (4095, 4097, 1023),    # ragged in every dim
        (2048, 32000, 4096),   # LLaMA-2 LM head
        (1024, 50257, 1024),   # GPT-2-medium LM head, odd vocab
    ),
    cpu_sweep=(
        (64, 64, 64),
        (96, 80, 72),
        (33, 65, 17),
        (1, 96, 64),
        (96, 1, 64),
        (17, 19, 96),
        (50, 70, 90),
    ),
    edge_shapes=(
        (1023, 1537, 4097),
        (4097, 1023, 1537),
        (1, 4096, 4096),
        (4096, 1, 4096),
        (4096, 4096, 1),
        (1, 1, 8192),
    ),
    cpu_edge_shapes=(
        (1, 1, 1),
        (1, 33, 17),
        (45, 1, 70),
        (31, 29, 1),
        (95, 93, 91),
    ),
    bench_shapes=((4096, 4096, 4096), (4096, 11008, 4096), (16, 4096, 4096)),
    adversarial=ADVERSARIAL,
    # Defaults hold at every K thanks to the fan-in scaling above (see the module docstring).
    tolerances=dict(DEFAULT_TOLERANCES),
    notes="FLOPs = 2*M*N*K. Shapes are MxNxK. B is scaled by 1/sqrt(K) like a linear layer's "
    "weight, so C is O(1) and fp32 is held to 1e-4 at every K; fp32 kernels must use ieee "
    "(or a verified tf32x3) dots, not plain tf32.",
)
