"""rotary_embedding: x·cos + rotate_half(x)·sin for x [B, H, S, D], cos and sin [S, D].

Rotate-half layout (HF LLaMA): the first half of the head dim pairs with the second half, and
cos/sin repeat their D/2 frequencies in both halves. D must be even.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from autokernel import reference
from autokernel.ops.spec import AdversarialCase, Inputs, OpSpec, Shape, element_size, sample

DIMS = ("B", "H", "S", "D")
ROPE_THETA = 10000.0
# Positions of a LLaMA-2 context; the inputs take a random window of them.
MAX_POSITIONS = 8192


def stock_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # There is no fused torch op: this is the eager formula models run, in x's dtype.
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The LLaMA cos/sin cache rows for `positions`: [len, head_dim], halves equal."""
    device = positions.device
    inv_freq = 1.0 / ROPE_THETA ** (
        torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    )
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _random_window(
    seq_len: int, device: str | torch.device, generator: torch.Generator, at_end: bool = False
) -> torch.Tensor:
    """`seq_len` consecutive positions starting at a random offset in [0, MAX_POSITIONS)."""
    room = max(0, MAX_POSITIONS - seq_len)
    start = room if at_end else int(
        torch.randint(0, room + 1, (1,), generator=generator, device=device).item()
    )
    return torch.arange(start, start + seq_len, device=device)


def _check_head_dim(shape: Shape) -> None:
    if shape[-1] % 2:
        raise ValueError(f"rotary_embedding needs an even head dim D; got {shape}")


def make_inputs(
    shape: Shape,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    _check_head_dim(shape)
    # "large" is 64·N(0,1): larger |x| makes a correct float32 kernel miss the fp32 atol on
    # outputs that cancel (x1·cos - x2·sin ~ 0), since its products round at ulp(|x|).
    x = sample(shape, dtype, device, generator, distribution, large_scale=64.0)
    cos, sin = rope_cos_sin(_random_window(shape[2], device, generator), shape[3], dtype)
    return x, cos, sin


def flops(shape: Shape) -> float:
    # 3 per output element: x·cos, rotate_half(x)·sin, and their sum (the sign flip is free).
    b, h, s, d = shape
    return 3.0 * b * h * s * d


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    b, h, s, d = shape
    # x read and the output written once; cos and sin read once each (not once per head).
    return (2.0 * b * h * s * d + 2.0 * s * d) * element_size(dtype)


def _large_magnitude(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    _check_head_dim(shape)
    # fp16/bf16: |x| up to ~2e4 and outputs up to ~3e4, near fp16's top (65504) without
    # overflowing. float32 keeps 64 (see make_inputs); its float32 range is not at stake.
    scale = 4096.0 if dtype in (torch.float16, torch.bfloat16) else 64.0
    x = sample(shape, dtype, device, generator, "large", large_scale=scale)
    cos, sin = rope_cos_sin(_random_window(shape[2], device, generator, at_end=True), shape[3],
                            dtype)
    return x, cos, sin


def _cancelling_rotation(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    _check_head_dim(shape)
    half = shape[-1] // 2
    cos, sin = rope_cos_sin(_random_window(shape[2], device, generator), shape[3], dtype)
    c, s = cos[:, :half].float(), sin[:, :half].float()
    # x2 = x1·cos/sin makes the first half of the output x1·cos - x2·sin ≈ 0 out of products of
    # ~50-200: half-precision arithmetic leaves an error of ulp(product) ~ 0.03-1 there, the
    # fp32 reference ~1e-5. Where |sin| is small the ratio is not used (x2 = x1).
    x1 = 50.0 * (2 * torch.rand(shape[:-1] + (half,), generator=generator, device=device) - 1)
    ratio = torch.where(s.abs() >= 0.25, c / s.where(s.abs() >= 0.25, 1.0), 1.0)
    x2 = x1 * ratio
    return torch.cat((x1, x2), dim=-1).to(dtype), cos, sin


def _late_positions(
    shape: Shape, dtype: torch.dtype, device: str | torch.device, generator: torch.Generator,
    distribution: str = "normal",
) -> Inputs:
    _check_head_dim(shape)
    x = sample(shape, dtype, device, generator, "normal")
    cos, sin = rope_cos_sin(_random_window(shape[2], device, generator, at_end=True), shape[3],
                            dtype)
    # Descending positions 8191, 8190, ...: a kernel that ignores cos/sin and recomputes them
    # from the row index (assuming positions 0..S-1), or reads them by the wrong row, fails.
    return x, cos.flip(0).contiguous(), sin.flip(0).contiguous()


ADVERSARIAL = (
    AdversarialCase(
        "large_magnitude",
        "|x| up to ~2e4 in fp16/bf16 (outputs near fp16's top) at the last positions of an "
        "8192 context: overflow in a careless intermediate, fp16 math",
        _large_magnitude,
    ),
    AdversarialCase(
        "cancelling_rotation",
        "x2 = x1·cos/sin so x1·cos - x2·sin ≈ 0 from products ~100: half-precision math shows "
        "as an absolute error far above the tolerance",
        _cancelling_rotation,
    ),
    AdversarialCase(
        "late_positions",
        "cos/sin of positions 8191 down to 8192-S (real frequencies, large angles): a kernel "
        "that recomputes cos/sin from the row index or reads them by the wrong row fails",
        _late_positions,
    ),
)


def liger_rotary() -> Callable[..., torch.Tensor] | None:
    """Liger's rope, which rotates q and k together, in place: x goes in as q (so x is
    overwritten; the harness gives every timed call fresh inputs) with a scratch one-head k, the
    least extra work its interface allows."""
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
    except ImportError:
        return None

    def run(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, _ = LigerRopeFunction.apply(x, torch.empty_like(x[:, :1]), cos, sin)
        return q

    return run


SPEC = OpSpec(
    name="rotary_embedding",
    dims=DIMS,
    reference=reference.rotary_embedding,
    stock=stock_rotary,
    liger=liger_rotary,
    make_inputs=make_inputs,
    flops=flops,
    bytes=bytes_moved,
    compute_bound=False,
    smoke_shape=(1, 2, 16, 64),
    sweep=(
        (1, 32, 4096, 128),  # LLaMA-2 7B, one 4k sequence
        (2, 32, 2048, 128),
        (4, 8, 1024, 64),
        (1, 40, 2048, 128),  # LLaMA-2 13B
        (8, 32, 512, 128),
        (1, 8, 8192, 128),  # GQA key heads over an 8k context
        (2, 16, 2048, 80),  # head dim 80 (non-power-of-two)
        (4, 12, 1024, 96),  # head dim 96
        (1, 32, 4096, 72),  # head dim 72: half = 36
    ),
    cpu_sweep=(
        (1, 1, 1, 2),
        (1, 2, 7, 64),
        (2, 3, 33, 80),
        (1, 4, 17, 72),
        (2, 2, 64, 128),
        (1, 1, 100, 96),
        (3, 5, 9, 16),
    ),
    edge_shapes=((1, 1, 1, 128), (1, 8, 1023, 128), (3, 5, 4097, 64), (1, 1, 1537, 80),
                 (2, 3, 1023, 2)),
    cpu_edge_shapes=((1, 1, 1, 128), (3, 1, 5, 2), (1, 2, 129, 64), (2, 1, 37, 72)),
    bench_shapes=((1, 32, 4096, 128), (2, 32, 2048, 128), (4, 8, 1024, 64)),
    adversarial=ADVERSARIAL,
    notes="rotate-half layout (HF LLaMA), cos/sin [S, D] with equal halves, D even; "
    "FLOPs = 3·B·H·S·D; bytes = read x + write out + read cos and sin once.",
)
