"""What the fused residual add + norm types (add_rmsnorm, add_layernorm) share: the rounded sum
their references normalize, and the (x, residual) pairs their inputs and adversarial cases are
made of. Each type adds its own affine tensors to a pair (`residual_input_maker`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from autokernel.ops.spec import Inputs, Shape, sample

# (x, residual, dtype, generator, eps) -> the op's inputs: the pair cast to dtype, plus the
# norm's affine tensors and eps.
WithAffine = Callable[[torch.Tensor, torch.Tensor, torch.dtype, torch.Generator, float], Inputs]
# (shape, dtype, device, generator, distribution) -> (x, residual) in float32.
PairMaker = Callable[[Shape, torch.dtype, str | torch.device, torch.Generator, str],
                     tuple[torch.Tensor, torch.Tensor]]
InputMaker = Callable[..., Inputs]


def rounded_sum(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """x + residual summed in float32 (float64 for float64 inputs) and rounded once to x's
    dtype: the h an unfused model stores, and the value its norm then reads."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    return (x.to(compute) + residual.to(compute)).to(x.dtype)


def residual_pair(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                  generator: torch.Generator, distribution: str
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    # "large" is 1e3 for both: sums stay inside fp16's range while h² overflows fp16 unless
    # squared in float32.
    x = sample(shape, torch.float32, device, generator, distribution, large_scale=1e3)
    residual = sample(shape, torch.float32, device, generator, distribution, large_scale=1e3)
    return x, residual


def large_residual_pair(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                        generator: torch.Generator, distribution: str
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    # Both near ±3e4: h reaches 6e4 (fp16 max 65504), h² overflows anything but float32.
    residual = 3.0e4 * sample(shape, torch.float32, device, generator, "uniform")
    x = 3.0e4 * sample(shape, torch.float32, device, generator, "uniform")
    return x, residual


def cancelling_pair(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                    generator: torch.Generator, distribution: str
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    # x = -residual as rounded to dtype, so h is exactly zero; every third row gets 1e-4 noise,
    # so its statistics sit far below eps. A kernel that normalizes x or residual instead of
    # their sum is far off.
    residual = 10.0 * sample(shape, torch.float32, device, generator, "normal")
    x = (-residual.to(dtype)).float()
    x[1::3] += 1.0e-4 * sample(x[1::3].shape, torch.float32, device, generator, "normal")
    return x, residual


def mixed_scale_pair(shape: Shape, dtype: torch.dtype, device: str | torch.device,
                     generator: torch.Generator, distribution: str
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    m = shape[0]
    scale = torch.pow(10.0, torch.randint(-4, 4, (m, 1), generator=generator, device=device))
    x = scale * sample(shape, torch.float32, device, generator, "uniform")
    residual = scale * sample(shape, torch.float32, device, generator, "uniform")
    return x, residual


def residual_input_maker(pair: PairMaker, with_affine: WithAffine,
                         default_eps: float) -> InputMaker:
    """An input generator (OpSpec.make_inputs, AdversarialCase.make_inputs) of `pair`'s x and
    residual with `with_affine`'s tensors; eps stays a named argument, so a profiled eps reaches
    it (harness/inputs.make_inputs passes the params a generator names)."""

    def make(shape: Shape, dtype: torch.dtype, device: str | torch.device,
             generator: torch.Generator, distribution: str = "normal",
             eps: float = default_eps) -> Inputs:
        x, residual = pair(shape, dtype, device, generator, distribution)
        return with_affine(x, residual, dtype, generator, eps)

    make.__name__ = f"{pair.__name__.removesuffix('_pair')}_inputs"
    return make
