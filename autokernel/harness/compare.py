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
element still holding the job's poison pattern (`guards.Poison`) was never written by the kernel.

The element-wise rule is absolute where outputs are small: with fp16's atol of 1e-2, a softmax
over 1000 columns whose every probability is below 1e-2 passes it as all zeros. So every row
(the last dim; a 1-D output is one row) must also hold, over the row's finite reference values,

    sum |out - ref|  <=  rtol * sum |ref|  +  min(N * atol, rtol * sum |ref|)  +  1.5 sum ulp

that is, the row's total error may not exceed what the element-wise rule allows in sum, with
atol's share capped at rtol times the row's mass; `ulp` is the output dtype's spacing at each
rounded reference value (half a step of correct rounding plus the step the second rule allows:
a row that passes element by element through the rounding rule alone passes here too). Where
the mean |ref| reaches atol/rtol (1 for the default tolerances) this is never stricter than the
element-wise rule; where outputs are
small it is relative (at most 2 * rtol of the row's mass: a softmax row that drops 3% of its
probability fails in fp16). It implies the row-sum invariant (|sum out - sum ref| is at most the
row's error).

The bound presumes an honest kernel's error scales with its outputs, as it does for pointwise and
normalised outputs (probabilities, norms, an activation). It does not apply to

- a one-element row: it is its element, which the element rule judged with its atol (the row
  bound would only tighten that to 2 * rtol for an output near zero);
- an op whose registry entry declares `cancelling` (matmul, fused_mlp, reduce, gelu): each
  output is computed through a sum whose terms may cancel (a contracted dim; GELU's
  1 + erf(x/sqrt 2), whose negative tail an honest fp32 erf kernel computes to ~1e-7 absolute,
  not relative, failing the bound at random on rows of the negative_tail case), and an honest
  kernel's accumulation-order
  error scales with the sum of |terms| (eps * sum |a||b| for a matmul), not with |output|. An
  honest fp32 matmul with K = 64 whose row cancels to near zero is past the bound many times
  over while well within atol, element by element; for these the element rule's atol is the
  floor.

On top of that, for every op, a row that is all zeros where its rounded reference is not, and an
output that is all zeros where the reference is not, never pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from autokernel.ops.spec import Tolerance, dtype_name
from autokernel.text import count_of

if TYPE_CHECKING:
    from autokernel.harness.guards.poison import Poison

# Explicit mantissa bits: torch.finfo's `eps` is 2**-mantissa for each.
MANTISSA_BITS: dict[torch.dtype, int] = {
    torch.float16: 10, torch.bfloat16: 7, torch.float32: 23, torch.float64: 52,
}

# Same-width integer views, for bitwise comparison (NaN payloads included).
BIT_VIEWS: dict[int, torch.dtype] = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# The row rule's rounding allowance, in steps of the output dtype per element: half a step of
# correct rounding plus the one step the element-wise rule allows.
ROW_ROUNDING_STEPS = 1.5

# Outputs are compared in chunks of this many elements, so the float64 temporaries stay small
# (32 MiB each) even for a 4096 x 128256 softmax.
CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Mismatch:
    """Why an output is wrong, in a form that fits on one line."""

    kind: str  # "type" | "device" | "dtype" | "shape" | "unwritten" | "nonfinite" | "tolerance"
    detail: str
    max_abs_error: float | None = None
    worst_index: tuple[int, ...] | None = None
    bad_elements: int = 0


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


def check_output(
    out: object,
    ref: torch.Tensor,
    expected_shape: tuple[int, ...],
    expected_dtype: torch.dtype,
    device: torch.device,
    tolerance: Tolerance,
    exhaustive: bool = True,
    poison: Poison | None = None,
    cancelling: bool = False,
) -> Mismatch | None:
    """None when `out` is a plain tensor of the right shape, dtype and device within tolerance
    (`poison`: the job's, to name elements never written; `cancelling`: the op's
    `OpSpec.cancelling`, which exempts it from the row rule's bound).

    With `exhaustive=False` the scan stops at the first chunk that fails (counts then cover only
    the chunks scanned): for callers that only need to know whether the output passes."""
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

    return _check_values(out, ref, tolerance, exhaustive, poison) \
        or _check_rows(out, ref, tolerance, cancelling)


@dataclass
class _Findings:
    """Per-category counts and positions, accumulated over chunks."""

    unwritten: int = 0
    first_unwritten: int = -1
    nonfinite: int = 0
    first_nonfinite: int = -1
    disagree: int = 0
    first_disagree: int = -1
    bad: int = 0
    worst: int = -1
    worst_excess: float = 0.0
    max_error: float = 0.0

    @property
    def failed(self) -> bool:
        return bool(self.unwritten or self.nonfinite or self.disagree or self.bad)

    def add(self, offset: int, counts: list[float]) -> None:
        (unwritten, first_unwritten, nonfinite, first_nonfinite, disagree, first_disagree, bad,
         worst, worst_excess, max_error) = counts
        for name, count, first in (("unwritten", unwritten, first_unwritten),
                                   ("nonfinite", nonfinite, first_nonfinite),
                                   ("disagree", disagree, first_disagree)):
            if count and getattr(self, f"first_{name}") < 0:
                setattr(self, f"first_{name}", offset + int(first))
            setattr(self, name, getattr(self, name) + int(count))
        self.bad += int(bad)
        if bad and worst_excess > self.worst_excess:
            self.worst_excess, self.worst = worst_excess, offset + int(worst)
        self.max_error = max(self.max_error, max_error)


def _first(mask: torch.Tensor) -> torch.Tensor:
    return mask.to(torch.uint8).argmax()


def _chunk_findings(out: torch.Tensor, ref: torch.Tensor, tolerance: Tolerance,
                    poison: Poison | None) -> list[float]:
    """One chunk's counts and positions, in a single device-to-host transfer."""
    # Fresh float64 copies (copy=True: a float64 reference must not be scrubbed in place).
    out64 = out.to(dtype=torch.float64, copy=True)
    ref64 = ref.to(device=out.device, dtype=torch.float64, copy=True)
    ref_rounded = ref.to(device=out.device, dtype=out.dtype).double()
    expect_nonfinite = ~torch.isfinite(ref_rounded)
    marks = poison.marks(out) if poison is not None else None
    unwritten = marks & ~expect_nonfinite if marks is not None else torch.zeros_like(
        expect_nonfinite)
    unexpected = ~torch.isfinite(out64) & ~expect_nonfinite
    # Where the reference itself is ±inf/NaN in this dtype, the output must agree exactly.
    same = (out64 == ref_rounded) | (torch.isnan(out64) & torch.isnan(ref_rounded))
    disagree = expect_nonfinite & ~same
    finite = ~expect_nonfinite & ~unexpected
    error = torch.where(finite, (out64 - ref64).abs(), torch.zeros_like(out64))
    allowed = tolerance.atol + tolerance.rtol * ref64.abs()
    # One representable step from the correctly rounded reference is honest rounding.
    steps = (out64 - ref_rounded).abs()
    one_step = steps <= ulp(ref_rounded, out.dtype)
    excess = torch.where(finite & ~one_step, error / allowed, torch.zeros_like(error))
    bad = excess > 1.0
    summary = torch.stack([
        unwritten.sum().double(), _first(unwritten).double(), unexpected.sum().double(),
        _first(unexpected).double(), disagree.sum().double(), _first(disagree).double(),
        bad.sum().double(), excess.argmax().double(), excess.max(), error.max(),
    ]).tolist()
    # These held the reference's values; freed unscrubbed, the allocator could hand them to the
    # candidate's next allocation of the same size (a replayed answer).
    scrub((out64, ref64, ref_rounded, error, allowed, steps, excess))
    return summary


def _check_values(out: torch.Tensor, ref: torch.Tensor, tolerance: Tolerance,
                  exhaustive: bool, poison: Poison | None) -> Mismatch | None:
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    found = _Findings()
    for offset in range(0, flat_out.numel(), CHUNK_ELEMENTS):
        chunk = slice(offset, offset + CHUNK_ELEMENTS)
        found.add(offset, _chunk_findings(flat_out[chunk], flat_ref[chunk], tolerance, poison))
        if not exhaustive and found.failed:
            break

    def values(flat: int) -> str:
        return (f"out={flat_out[flat].double().item():.6g} "
                f"ref={flat_ref[flat].double().item():.6g}")

    total = out.numel()
    if found.unwritten:
        idx = _index(found.first_unwritten, out.shape)
        return Mismatch("unwritten", f"{found.unwritten} of {total} output elements were never "
                        f"written (the job's poison survives), first at {list(idx)}",
                        worst_index=idx, bad_elements=found.unwritten)
    if found.nonfinite:
        idx = _index(found.first_nonfinite, out.shape)
        return Mismatch("nonfinite", f"{found.nonfinite} NaN/Inf outputs where the reference is "
                        f"finite, first at {list(idx)} ({values(found.first_nonfinite)})",
                        worst_index=idx, bad_elements=found.nonfinite)
    if found.disagree:
        idx = _index(found.first_disagree, out.shape)
        return Mismatch("nonfinite", f"{found.disagree} outputs differ where the reference is "
                        f"non-finite, first at {list(idx)} ({values(found.first_disagree)})",
                        worst_index=idx, bad_elements=found.disagree)
    if found.bad:
        idx = _index(found.worst, out.shape)
        return Mismatch(
            "tolerance",
            f"{found.bad} of {total} elements outside atol={tolerance.atol:g} "
            f"rtol={tolerance.rtol:g}; max abs error {found.max_error:.4g}; worst at "
            f"{list(idx)}: {values(found.worst)}",
            max_abs_error=found.max_error, worst_index=idx, bad_elements=found.bad,
        )
    return None


def _check_rows(out: torch.Tensor, ref: torch.Tensor, tolerance: Tolerance,
                cancelling: bool = False) -> Mismatch | None:
    """The row rule of the module docstring (not for a `cancelling` op), and no all-zero rows or
    output where the reference has values (for every op)."""
    if out.ndim == 0:
        return None
    width = out.shape[-1]
    if width == 1:
        # A one-element row is its element: the element rule judged it, with its atol. The row
        # rule's relative bound would only tighten that atol for an output near zero (a sum
        # that cancels, whatever the op). An all-zero output still never passes.
        all_zero = not bool(out.ne(0).any())
        if all_zero and bool(ref.ne(0).any()):
            return Mismatch("degenerate", "the output is all zeros where the reference is not")
        return None
    rows_out, rows_ref = out.reshape(-1, width), ref.reshape(-1, width)
    per_chunk = max(1, CHUNK_ELEMENTS // max(1, width))
    all_zero_output, reference_nonzero = True, False
    for start in range(0, rows_out.shape[0], per_chunk):
        # Fresh copies (copy=True): scrubbing must never reach the reference itself.
        o = rows_out[start: start + per_chunk].to(torch.float64, copy=True)
        r64 = rows_ref[start: start + per_chunk].to(device=out.device, dtype=torch.float64,
                                                     copy=True)
        rounded = rows_ref[start: start + per_chunk].to(device=out.device, dtype=out.dtype,
                                                         copy=True).to(torch.float64, copy=True)
        finite_rows = torch.isfinite(rounded).all(dim=1) & torch.isfinite(o).all(dim=1)
        zero_out = (o == 0).all(dim=1)
        has_values = (rounded != 0).any(dim=1)
        error = torch.where(finite_rows[:, None], (o - r64).abs(), torch.zeros_like(o)).sum(1)
        mass = torch.where(finite_rows[:, None], r64.abs(), torch.zeros_like(o)).sum(1)
        steps = torch.where(finite_rows[:, None], ulp(rounded, out.dtype),
                            torch.zeros_like(o)).sum(1)
        bound = tolerance.rtol * mass + torch.minimum(
            torch.full_like(mass, width * tolerance.atol), tolerance.rtol * mass) \
            + ROW_ROUNDING_STEPS * steps
        # A cancelling op's honest error scales with its terms, not its row's mass (module
        # docstring): the element rule, already passed, is its bound.
        bad = finite_rows & has_values & (error > bound) & (not cancelling)
        zero_rows = finite_rows & zero_out & has_values
        summary = torch.stack([zero_rows.sum().double(), _first(zero_rows).double(),
                               bad.sum().double(), _first(bad).double(),
                               (error / bound.clamp(min=1e-300)).where(bad, 0).max(),
                               (~zero_out).any().double(), has_values.any().double()]).tolist()
        scrub((o, r64, rounded, error, mass, bound, steps))
        zeros, first_zero, bad_rows, first_bad, excess, nonzero_out, has_ref = summary
        all_zero_output &= not nonzero_out
        reference_nonzero |= bool(has_ref)
        row_of = _index(start, rows_out.shape)[0]
        if zeros:
            return Mismatch("degenerate", f"{int(zeros)} output rows are all zeros where the "
                            f"reference's are not, first row {row_of + int(first_zero)}",
                            bad_elements=int(zeros) * width)
        if bad_rows:
            row = row_of + int(first_bad)
            return Mismatch("tolerance", f"{count_of(int(bad_rows), 'row')} whose total error is "
                            f"past the "
                            f"row rule (sum |out-ref| <= rtol*sum|ref| + min(N*atol, "
                            f"rtol*sum|ref|) + 1.5 ulp per element, rtol={tolerance.rtol:g} "
                            f"atol={tolerance.atol:g}), "
                            f"first row {row} at {excess:.3g}x the bound: small outputs "
                            "dropped or flattened", bad_elements=int(bad_rows) * width)
    if all_zero_output and reference_nonzero:
        return Mismatch("degenerate", "the output is all zeros where the reference is not")
    return None


def scrub(tensors: tuple[torch.Tensor, ...]) -> None:
    """Overwrite temporaries that held reference-derived values before they are freed."""
    for t in tensors:
        t.fill_(float("nan") if t.dtype.is_floating_point else -1)
