"""Is a candidate's output right? The element-wise rule every correctness stage applies.

An element passes when

    |out - ref| <= atol + rtol * |ref|      or      |out - round(ref)| <= one ulp at round(ref)

with atol/rtol from the op's registry entry, `ref` the oracle computed on upcast inputs (float32,
or float64 for small inputs) and round() the rounding to the output dtype. The second rule keeps an
honest low-precision kernel from being failed for rounding: a bf16 output one representable step
from the correctly rounded value of a large reference passes even where rtol alone would be
tighter than bf16's spacing there.

Non-finite values are compared by position: where the reference, rounded to the output dtype, is
finite, the output must be finite; where it is ±inf or NaN, the output must be the same. An output
element still holding the harness's poison bit pattern was never written by the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from autokernel.ops.spec import Tolerance, dtype_name

# Explicit mantissa bits: torch.finfo's `eps` is 2**-mantissa for each.
MANTISSA_BITS: dict[torch.dtype, int] = {
    torch.float16: 10, torch.bfloat16: 7, torch.float32: 23, torch.float64: 52,
}

# Same-width integer views, for bitwise comparison (NaN payloads included).
BIT_VIEWS: dict[int, torch.dtype] = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# The poison byte: 0xFF in every byte is a NaN in fp16, bf16, fp32 and fp64 alike, and -1 in ints.
POISON_BYTE = 0xFF


@dataclass(frozen=True)
class Mismatch:
    """Why an output is wrong, in a form that fits on one line."""

    kind: str  # "type" | "device" | "dtype" | "shape" | "unwritten" | "nonfinite" | "tolerance"
    detail: str
    max_abs_error: float | None = None
    worst_index: tuple[int, ...] | None = None
    bad_elements: int = 0

    def describe(self) -> str:
        return self.detail


def bits(t: torch.Tensor) -> torch.Tensor:
    """`t`'s raw bits as same-width integers (bitwise equality that treats NaN like any value)."""
    t = t.contiguous()
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return t.view(BIT_VIEWS[t.element_size()])
    return t


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def ulp(magnitude: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of `dtype`'s representable values at |magnitude| (float64 in, float64 out)."""
    if dtype not in MANTISSA_BITS:
        return torch.zeros_like(magnitude)
    finfo = torch.finfo(dtype)
    # Below the smallest normal, spacing is constant: the subnormal step.
    clamped = magnitude.abs().clamp(min=finfo.tiny)
    exponent = torch.floor(torch.log2(clamped))
    return torch.exp2(exponent - MANTISSA_BITS[dtype])


def _index(flat_index: int, shape: torch.Size) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat_index % size if size else 0)
        flat_index = flat_index // size if size else 0
    return tuple(reversed(index))


def _is_poison(out: torch.Tensor) -> torch.Tensor:
    """Elements whose every byte is the poison byte."""
    raw = bits(out)
    all_ones = torch.tensor(-1, dtype=raw.dtype, device=raw.device) if raw.dtype != torch.uint8 \
        else torch.tensor(POISON_BYTE, dtype=torch.uint8, device=raw.device)
    return raw == all_ones


def check_output(
    out: object,
    ref: torch.Tensor,
    expected_shape: tuple[int, ...],
    expected_dtype: torch.dtype,
    device: torch.device,
    tolerance: Tolerance,
) -> Mismatch | None:
    """None when `out` is a plain tensor of the right shape, dtype and device within tolerance."""
    if type(out) is not torch.Tensor:  # noqa: E721 - subclasses (lazy outputs) must not pass
        return Mismatch("type", f"returned {type(out).__module__}.{type(out).__qualname__}, "
                        "not a plain torch.Tensor")
    if out.device.type != device.type:
        return Mismatch("device", f"output on {out.device}, expected {device.type}")
    if out.dtype != expected_dtype:
        return Mismatch("dtype", f"output dtype {dtype_name(out.dtype)}, expected "
                        f"{dtype_name(expected_dtype)}")
    if tuple(out.shape) != tuple(expected_shape):
        return Mismatch("shape", f"output shape {list(out.shape)}, expected "
                        f"{list(expected_shape)}")
    if out.numel() == 0:
        return None

    if not out.dtype.is_floating_point:
        wrong = out.to(ref.device) != ref.to(out.dtype)
        if bool(wrong.any()):
            flat = int(wrong.reshape(-1).nonzero()[0])
            return Mismatch("tolerance", f"{int(wrong.sum())} integer elements differ",
                            worst_index=_index(flat, out.shape), bad_elements=int(wrong.sum()))
        return None

    # Fresh float64 copies (copy=True: a float64 reference must not be scrubbed in place).
    out64 = out.to(dtype=torch.float64, copy=True)
    ref64 = ref.to(device=out.device, dtype=torch.float64, copy=True)
    ref_rounded = ref.to(device=out.device, dtype=out.dtype).double()
    try:
        return _check_values(out, out64, ref64, ref_rounded, tolerance)
    finally:
        # These hold the reference's values; freed unscrubbed, the allocator could hand them to
        # the candidate's next output allocation of the same size (a replayed answer).
        scrub((out64, ref64, ref_rounded))


def _check_values(out: torch.Tensor, out64: torch.Tensor, ref64: torch.Tensor,
                  ref_rounded: torch.Tensor, tolerance: Tolerance) -> Mismatch | None:
    expect_nonfinite = ~torch.isfinite(ref_rounded)
    out_nonfinite = ~torch.isfinite(out64)

    poison = _is_poison(out) & ~expect_nonfinite
    if bool(poison.any()):
        count = int(poison.sum())
        flat = int(poison.reshape(-1).nonzero()[0])
        return Mismatch("unwritten", f"{count} of {out.numel()} output elements were never "
                        f"written (the harness's poison survives), first at "
                        f"{list(_index(flat, out.shape))}", worst_index=_index(flat, out.shape),
                        bad_elements=count)

    unexpected = out_nonfinite & ~expect_nonfinite
    if bool(unexpected.any()):
        count = int(unexpected.sum())
        flat = int(unexpected.reshape(-1).nonzero()[0])
        idx = _index(flat, out.shape)
        return Mismatch("nonfinite", f"{count} NaN/Inf outputs where the reference is finite, "
                        f"first at {list(idx)} (out={out64.reshape(-1)[flat].item():.6g}, "
                        f"ref={ref64.reshape(-1)[flat].item():.6g})", worst_index=idx,
                        bad_elements=count)
    # Where the reference itself is ±inf/NaN in this dtype, the output must agree exactly.
    if bool(expect_nonfinite.any()):
        same = (out64 == ref_rounded) | (torch.isnan(out64) & torch.isnan(ref_rounded))
        disagree = expect_nonfinite & ~same
        if bool(disagree.any()):
            flat = int(disagree.reshape(-1).nonzero()[0])
            idx = _index(flat, out.shape)
            return Mismatch("nonfinite", f"{int(disagree.sum())} outputs differ where the "
                            f"reference is non-finite, first at {list(idx)} "
                            f"(out={out64.reshape(-1)[flat].item():.6g}, "
                            f"ref={ref_rounded.reshape(-1)[flat].item():.6g})",
                            worst_index=idx, bad_elements=int(disagree.sum()))

    finite = ~expect_nonfinite
    error = torch.where(finite, (out64 - ref64).abs(), torch.zeros_like(out64))
    allowed = tolerance.atol + tolerance.rtol * ref64.abs()
    # One representable step from the correctly rounded reference is honest rounding.
    steps = (out64 - ref_rounded).abs()
    one_step = steps <= ulp(ref_rounded, out.dtype)
    excess = torch.where(finite & ~one_step, error / allowed, torch.zeros_like(error))
    try:
        return _tolerance_verdict(out, out64, ref64, error, excess, tolerance)
    finally:
        scrub((error, allowed, excess, steps))


def _tolerance_verdict(out: torch.Tensor, out64: torch.Tensor, ref64: torch.Tensor,
                       error: torch.Tensor, excess: torch.Tensor,
                       tolerance: Tolerance) -> Mismatch | None:
    bad = excess > 1.0
    if bool(bad.any()):
        count = int(bad.sum())
        flat = int(excess.reshape(-1).argmax())
        idx = _index(flat, out.shape)
        max_err = float(error.max())
        return Mismatch(
            "tolerance",
            f"{count} of {out.numel()} elements outside atol={tolerance.atol:g} "
            f"rtol={tolerance.rtol:g}; max abs error {max_err:.4g}; worst at {list(idx)}: "
            f"out={out64.reshape(-1)[flat].item():.6g} ref={ref64.reshape(-1)[flat].item():.6g}",
            max_abs_error=max_err, worst_index=idx, bad_elements=count,
        )
    return None


def scrub(tensors: tuple[torch.Tensor, ...]) -> None:
    """Overwrite temporaries that held reference-derived values before they are freed."""
    for t in tensors:
        t.fill_(float("nan") if t.dtype.is_floating_point else -1)


def max_abs_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest |out - ref| over elements finite in both (0.0 for empty outputs)."""
    if out.numel() == 0:
        return 0.0
    out64, ref64 = out.double(), ref.to(out.device).double()
    both = torch.isfinite(out64) & torch.isfinite(ref64)
    if not bool(both.any()):
        return 0.0
    return float((out64 - ref64).abs()[both].max())
