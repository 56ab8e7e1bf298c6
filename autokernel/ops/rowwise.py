"""Shape tables shared by the row-wise ops over x[M, N] (softmax, layernorm, rmsnorm).

Their starters share one structure (a row in registers up to a limit, a looped walk beyond it),
so they are checked and timed at the same rows; each op adds only what is its own.
"""

from __future__ import annotations

from autokernel.ops.spec import Shape

# LLaMA/GPT widths, a vocab-sized row and a long batch: realistic GPU rows.
ROW_SWEEP: tuple[Shape, ...] = (
    (4096, 4096),
    (8192, 8192),
    (16384, 8192),
    (4096, 5120),
    (32768, 4096),
    (2048, 11008),
    (1024, 32000),
)
ROW_CPU_SWEEP: tuple[Shape, ...] = (
    (1, 1),
    (4, 8),
    (7, 33),
    (16, 100),
    (5, 513),
    (3, 1000),
    (2, 2500),
    (2, 20000),  # longer than the starters' default single-pass limit: exercises their loops
)
ROW_EDGE_SHAPES: tuple[Shape, ...] = ((1023, 4097), (4097, 1537), (1537, 1), (1, 4097))
# (1, 32769): wider than a 32768-column tile, among the first two (the quick sweep's).
ROW_CPU_EDGE_SHAPES: tuple[Shape, ...] = ((1, 129), (1, 32769), (33, 1), (9, 257), (3, 1537),
                                          (1, 17000))
ROW_BENCH_SHAPES: tuple[Shape, ...] = ((4096, 4096), (8192, 8192), (16384, 8192))
# The fused residual add + norm types (add_rmsnorm, add_layernorm) add a short wide and a long
# narrow batch, and odd widths on either side of a power of two (their loops' masked tails).
RESIDUAL_NORM_SWEEP: tuple[Shape, ...] = ROW_SWEEP + ((8192, 2048), (2048, 16384))
RESIDUAL_NORM_EDGE_SHAPES: tuple[Shape, ...] = ROW_EDGE_SHAPES + ((1023, 1000), (257, 4099))
RESIDUAL_NORM_CPU_EDGE_SHAPES: tuple[Shape, ...] = ROW_CPU_EDGE_SHAPES + ((2, 4099),)

# Over dim 1 of x[M, N, K] (OpSpec.axis_dim), planned only for targets over such a dim: channels of
# an NCHW tensor (KernelBench's RMSNorm, 16x64x256x256), a middle dim of a 3-D tensor, a long
# reduced dim over a short inner one, and inner runs narrower and wider than one block.
AXIS_SWEEP: tuple[Shape, ...] = ((16, 64, 65536), (32, 4096, 256))
AXIS_CPU_SWEEP: tuple[Shape, ...] = ((2, 8, 33), (3, 300, 5))
AXIS_EDGE_SHAPES: tuple[Shape, ...] = ((16, 1023, 4097), (1, 65537, 3))
AXIS_CPU_EDGE_SHAPES: tuple[Shape, ...] = ((1, 1, 7), (2, 1537, 3))
