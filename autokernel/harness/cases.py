"""Which inputs each of the five correctness stages feeds the candidate.

1. smoke: one small input (the registry's smoke shape), to fail fast.
2. shape_sweep: the registry's sweep (its `cpu_sweep` on the interpreter), plus the timed shapes
   and the model's own shapes, in every correctness dtype.
3. stability: the op's adversarial inputs and the four distributions (normal, signed uniform,
   non-negative, large magnitude), in every correctness dtype, at one realistic shape.
4. determinism: the same input three times (bitwise equal outputs), then the same buffers
   refilled with new values that agree with the old ones at the first and last elements (a cache
   keyed on pointers or on a fingerprint of a few values replays a stale answer here), then new
   buffers of the same shape.
5. edge_sizes: the registry's non-power-of-two and single-row/column shapes, then the same
   values in non-contiguous memory (LAYOUTS: rows padded apart, the last two dims transposed).

The sweep and edge shapes over a dim that is not the last ((M, N, K > 1), `OpSpec.axis_dim`) are
planned only for a target over such a dim, which is checked at last-dim shapes too.

Every case gets its own seed, derived from the run's secret by a keyed hash (`seeds`); the plan
itself is public, except for its random part (`random_shapes`).
`quick` trims the number of shapes (never a detector): on the interpreter, to keep the test
suite fast; on a GPU, for the loop's screen, to the timed and model shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from autokernel.ops.spec import DISTRIBUTIONS, OpSpec, Shape, dtype_name

STAGES: tuple[str, ...] = ("smoke", "shape_sweep", "stability", "determinism", "edge_sizes")
# Views a model passes as often as contiguous tensors (a slice of a fused projection, x @ W.T):
# every floating input of two or more dims is given in that layout, with the same values.
LAYOUTS: tuple[str, ...] = ("row_strided", "transposed")
DETERMINISM_REPEATS = 3


@dataclass(frozen=True)
class Case:
    stage: str
    shape: Shape
    dtype: torch.dtype
    label: str = ""  # e.g. "normal", "adversarial:equal_large", "refill"
    distribution: str = "normal"
    adversarial: str | None = None
    splice_from: int | None = None  # index of the case whose first/last values this one reuses
    layout: str | None = None  # one of LAYOUTS: the same values in non-contiguous memory

    def describe(self, spec: OpSpec) -> str:
        what = f" {self.label}" if self.label else ""
        return f"{self.stage}{what} [{spec.format_shape(self.shape)}] {dtype_name(self.dtype)}"


def _unique(shapes: list[Shape]) -> list[Shape]:
    seen: dict[Shape, None] = {}
    for shape in shapes:
        seen.setdefault(tuple(shape), None)
    return list(seen)


def _over_an_axis(spec: OpSpec, shape: Shape) -> bool:
    return spec.inner(shape) > 1


def _last_dim_shapes(spec: OpSpec, shapes: tuple[Shape, ...]) -> list[Shape]:
    return [s for s in shapes if not _over_an_axis(spec, s)]


def _middle_cpu_shape(spec: OpSpec) -> Shape:
    """The middle of the CPU sweep's last-dim shapes (the axis shapes come after them)."""
    shapes = _last_dim_shapes(spec, spec.cpu_sweep)
    return shapes[len(shapes) // 2]


def default_timing_shapes(spec: OpSpec, device: str) -> list[Shape]:
    """The registry's first bench shape on a GPU; on the interpreter, where a bench shape would
    take minutes, the middle of the CPU sweep."""
    if device == "cuda":
        return [spec.bench_shapes[0]]
    return [_middle_cpu_shape(spec)]


def default_timing_dtypes(spec: OpSpec, device: str) -> list[torch.dtype]:
    preferred = torch.float16 if device == "cuda" else torch.float32
    return [preferred if preferred in spec.dtypes else spec.dtypes[0]]


def plan_cases(
    spec: OpSpec,
    device: str,
    correctness_dtypes: list[torch.dtype],
    timing_shapes: list[Shape],
    model_shapes: list[Shape],
    quick: bool = False,
) -> list[Case]:
    on_gpu = device == "cuda"
    sweep = list(spec.sweep if on_gpu else spec.cpu_sweep)
    edges = list(spec.edge_shapes if on_gpu else spec.cpu_edge_shapes)
    if not any(_over_an_axis(spec, s) for s in (*timing_shapes, *model_shapes)):
        # A target over the last dim is checked over the last dim only: its kernel is routed
        # for such calls alone, and a kernel.py written before axes existed stays valid.
        sweep, edges = _last_dim_shapes(spec, tuple(sweep)), _last_dim_shapes(spec, tuple(edges))
    if quick:
        # On a GPU each shape is one more compile of every new variant, and the quick sweep is
        # the loop's screen, whose would-be keeps all get the full sweep: the timed and model
        # shapes (and the odd-sized smoke shape) are enough there.
        sweep, edges = ([], []) if on_gpu else (sweep[:2], edges[:2])
    sweep = _unique(sweep + list(timing_shapes) + list(model_shapes))
    stability_shape = timing_shapes[0] if on_gpu else spec.smoke_shape
    determinism_shape = timing_shapes[0] if on_gpu else spec.smoke_shape

    cases = [Case("smoke", spec.smoke_shape, correctness_dtypes[0])]
    for shape in sweep:
        label = "model" if shape in model_shapes else ("timed" if shape in timing_shapes else "")
        cases.extend(Case("shape_sweep", shape, dtype, label) for dtype in correctness_dtypes)
    for dtype in correctness_dtypes:
        for adversarial in spec.adversarial:
            cases.append(Case("stability", stability_shape, dtype,
                              f"adversarial:{adversarial.name}", adversarial=adversarial.name))
        for distribution in DISTRIBUTIONS:
            cases.append(Case("stability", stability_shape, dtype, distribution,
                              distribution=distribution))
    for dtype in correctness_dtypes:
        base = len(cases)
        cases.append(Case("determinism", determinism_shape, dtype, "repeat"))
        cases.append(Case("determinism", determinism_shape, dtype, "refill", splice_from=base))
        cases.append(Case("determinism", determinism_shape, dtype, "new_buffers"))
    for shape in _unique(edges):
        cases.extend(Case("edge_sizes", shape, dtype) for dtype in correctness_dtypes)
    if not (quick and on_gpu):
        layout_shape = timing_shapes[0] if on_gpu else _middle_cpu_shape(spec)
        cases.extend(Case("edge_sizes", layout_shape, correctness_dtypes[0], f"layout:{layout}",
                          layout=layout) for layout in LAYOUTS)
    return cases
