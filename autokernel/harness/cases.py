"""Which inputs each of the five correctness stages feeds the candidate.

1. smoke: one small input (the registry's smoke shape), to fail fast.
2. shape_sweep: the registry's sweep (its `cpu_sweep` on the interpreter), plus the timed shapes
   and the model's own shapes, in every correctness dtype.
3. stability: the op's adversarial inputs and the four distributions (normal, signed uniform,
   non-negative, large magnitude), in every correctness dtype, at one realistic shape; the
   adversarial inputs again at every timed and model shape, in the timed dtypes (a kernel that
   is exact only where the registry's stability shape looks fails there); and, for the ops
   whose reference defines their output on them (`NONFINITE_TYPES`), inputs holding NaN, +inf
   and -inf.
4. determinism: the same input three times (bitwise equal outputs), then the same buffers
   refilled with new values that agree with the old ones at the first and last elements (a cache
   keyed on pointers or on a fingerprint of a few values replays a stale answer here), then new
   buffers of the same shape.
5. edge_sizes: the registry's non-power-of-two and single-row/column shapes, then the same
   values in non-contiguous memory (LAYOUTS: rows padded apart, the last two dims transposed,
   a storage offset that breaks 16-byte alignment; and, for the ops in BATCH_LAYOUT_TYPES,
   batch dims that are not packed: a slice of a longer buffer along dim -2 and dims -3 and -2
   stored swapped, the [B, S, H, D].transpose(1, 2) of attention's q and k), in every
   correctness dtype.

Every case also runs in an autograd context (`GRAD_CONTEXTS`) drawn for this job from the plan's
random source, each context in every stage that has as many cases (the determinism stage's refill
keeps its repeat's): plain (grad on), under `torch.no_grad()`, under `torch.inference_mode()` on
inference tensors (serving), on inputs that require grad and carry a grad_fn (a training
forward), the same with grad off (inside an autograd.Function's forward, where the
integration's custom op calls kernel_fn), and under torch.autocast (mixed-precision training).
A kernel that tells the contexts apart fails.

The sweep also holds shapes no document lists: for row-wise ops a width that is a multiple of
64 up to 1024, and `RANDOM_SHAPES` shapes drawn for this job from the plan's own random source
(the judge's secret): a plan fitted to the documented shapes fails on them. An op with a
reduction dim K gets a deep one (K = 4096 with small M and N: an fp16 running sum fails there).

The sweep and edge shapes over a dim that is not the last ((M, N, K > 1), `OpSpec.axis_dim`) are
planned only for a target over such a dim, which is checked at last-dim shapes too.

Every case gets its own seed, derived from the run's secret by a keyed hash (`seeds`); the plan
itself is public, except for its random part (`random_shapes`).
`quick` trims the number of shapes (never a detector): on the interpreter, to keep the test
suite fast; on a GPU, for the loop's screen, to the timed and model shapes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import torch

from autokernel.ops.spec import DISTRIBUTIONS, OpSpec, Shape, dtype_name

STAGES: tuple[str, ...] = ("smoke", "shape_sweep", "stability", "determinism", "edge_sizes")
# Views a model passes as often as contiguous tensors (a slice of a fused projection, x @ W.T):
# every floating input of two or more dims is given in that layout, with the same values.
LAYOUTS: tuple[str, ...] = ("row_strided", "transposed", "offset")
# Batch dims not packed behind dim -2 (`inputs.relayout`): for inputs of 3+ dims of the ops whose
# kernel_fn the integration hands such views as they are (rotary's and attention's q/k/v, which
# are [B, S, H, D].transpose(1, 2) or a slice of a fused qkv; gelu's activations, any dims, any
# strides). A 2-D input of such an op is given as a 3-D view of the same rows. The row-wise ops'
# routes (softmax, the norms, reduce, cross entropy) reshape to 2-D rows before kernel_fn, so
# those only ever see 2-D inputs at the last dim; over another dim they get x.reshape(outer, N,
# inner), a view with an unpacked outer stride for a channel slice of an NCHW tensor, so an
# axis target gets these layouts at its first axis shape. (matmul's batched route hands A and B
# as they are.)
BATCH_LAYOUTS: tuple[str, ...] = ("batch_sliced", "batch_permuted")
BATCH_LAYOUT_TYPES: frozenset[str] = frozenset({"rotary_embedding", "flash_attention", "gelu",
                                                "matmul"})
# Autograd contexts of a call (drawn per case, see the module docstring; `candidate` applies them).
GRAD_CONTEXTS: tuple[str, ...] = ("plain", "no_grad", "inference_mode", "requires_grad",
                                  "autograd_forward", "autocast")
DETERMINISM_REPEATS = 3
# Row-wise ops (dims M x N, or M x V): the width is the last dim, free to be any size.
ROW_DIMS: frozenset[tuple[str, ...]] = frozenset({("M", "N"), ("M", "V")})
RANDOM_SHAPES = 2
# Largest random shapes: (rows, width) on the interpreter, and on a GPU.
RANDOM_LIMITS = {"cpu": (9, 700), "cuda": (4096, 8192)}
DEEP_K = 4096
# Ops whose reference gives a defined output on NaN and +-inf inputs (softmax: a NaN row for NaN
# or +inf, zero probability for -inf; the norms: a NaN or inf row stays non-finite; elementwise
# and rotary: position by position), which an honest kernel matches position by position. A
# kernel that turns a NaN into a plausible number hides a training divergence.
NONFINITE_TYPES: frozenset[str] = frozenset({
    "softmax", "rmsnorm", "layernorm", "add_rmsnorm", "add_layernorm", "gelu",
    "rotary_embedding", "reduce", "cross_entropy"})
NONFINITE = "nonfinite"


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
    inject: str | None = None  # NONFINITE: NaN, +inf and -inf put into the values
    grad: str = "plain"  # one of GRAD_CONTEXTS: the autograd context of the call

    def describe(self, spec: OpSpec) -> str:
        what = f" {self.label}" if self.label else ""
        how = "" if self.grad == "plain" else f" ({self.grad})"
        return (f"{self.stage}{what} [{spec.format_shape(self.shape)}] "
                f"{dtype_name(self.dtype)}{how}")


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


def extra_shapes(spec: OpSpec, device: str, rng: random.Random | None) -> list[Shape]:
    """Shapes beyond the registry's: a width that is a multiple of 64 up to 1024 and random ones
    (row-wise ops), a deep K (ops with a K dim)."""
    shapes: list[Shape] = []
    if spec.dims in ROW_DIMS:
        rows_limit, width_limit = RANDOM_LIMITS["cuda" if device == "cuda" else "cpu"]
        pick = rng or random.Random(0)
        shapes.append((pick.randint(1, 5), 64 * pick.randint(1, 16)))
        if rng is not None:
            shapes += [(rng.randint(1, rows_limit), rng.randint(1, width_limit))
                       for _ in range(RANDOM_SHAPES)]
    if "K" in spec.dims:
        small = {"B": 1, "M": 3, "N": 5}
        shapes.append(tuple(DEEP_K if d == "K" else small.get(d, 2) for d in spec.dims))
    return shapes


def plan_cases(
    spec: OpSpec,
    device: str,
    correctness_dtypes: list[torch.dtype],
    timing_shapes: list[Shape],
    model_shapes: list[Shape],
    quick: bool = False,
    rng: random.Random | None = None,
    timing_dtypes: list[torch.dtype] | None = None,
) -> list[Case]:
    """The job's cases; `rng` (from the judge's secret) draws the random shapes (none without
    it), `timing_dtypes` are the dtypes the adversarial inputs are repeated in at the timed and
    model shapes (default: the first correctness dtype)."""
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
    if not (quick and on_gpu):
        sweep += extra_shapes(spec, device, rng)
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
        if spec.name in NONFINITE_TYPES:
            cases.append(Case("stability", stability_shape, dtype, "nan-and-inf",
                              inject=NONFINITE))
    repeated = [d for d in (timing_dtypes or correctness_dtypes[:1]) if d in correctness_dtypes]
    for shape in _unique([*timing_shapes, *model_shapes]):
        if tuple(shape) == tuple(stability_shape):
            continue
        for dtype in repeated:
            cases.extend(Case("stability", shape, dtype, f"adversarial:{a.name}",
                              adversarial=a.name) for a in spec.adversarial)
    for dtype in correctness_dtypes:
        base = len(cases)
        cases.append(Case("determinism", determinism_shape, dtype, "repeat"))
        cases.append(Case("determinism", determinism_shape, dtype, "refill", splice_from=base))
        cases.append(Case("determinism", determinism_shape, dtype, "new_buffers"))
    for shape in _unique(edges):
        cases.extend(Case("edge_sizes", shape, dtype) for dtype in correctness_dtypes)
    if not (quick and on_gpu):
        layout_shape = timing_shapes[0] if on_gpu else _middle_cpu_shape(spec)
        cases.extend(Case("edge_sizes", layout_shape, dtype, f"layout:{layout}", layout=layout)
                     for dtype in correctness_dtypes for layout in LAYOUTS)
        if spec.name in BATCH_LAYOUT_TYPES:  # a batch of two at least (matmul's B = 1 is 2-D)
            batched = tuple(max(2, d) if n == "B" else d for n, d in zip(spec.dims, layout_shape))
            cases.extend(Case("edge_sizes", batched, dtype, f"layout:{layout}", layout=layout)
                         for dtype in correctness_dtypes for layout in BATCH_LAYOUTS)
        axis_shapes = [s for s in _unique([*timing_shapes, *model_shapes])
                       if _over_an_axis(spec, s)]
        if axis_shapes:  # the [outer, N, inner] view of a channel slice or a transpose
            cases.extend(Case("edge_sizes", axis_shapes[0], dtype, f"layout:{layout}",
                              layout=layout)
                         for dtype in correctness_dtypes for layout in BATCH_LAYOUTS)
    return with_grad_contexts(cases, rng or random.Random(0))


def with_grad_contexts(cases: list[Case], rng: random.Random) -> list[Case]:
    """`cases`, each with an autograd context drawn from `rng`: every stage's cases spread over
    GRAD_CONTEXTS in a random order, each context as often as the others (give or take one),
    so a stage of at least len(GRAD_CONTEXTS) cases (refills not counted) runs every one. A
    refill case keeps the context of the case whose buffers it refills (the same tensors)."""
    out = list(cases)
    for stage in STAGES:
        own = [i for i, c in enumerate(cases) if c.stage == stage and c.splice_from is None]
        offset = rng.randrange(len(GRAD_CONTEXTS))
        order = [GRAD_CONTEXTS[(offset + i) % len(GRAD_CONTEXTS)] for i in range(len(own))]
        rng.shuffle(order)
        for i, grad in zip(own, order):
            out[i] = replace(cases[i], grad=grad)
    # A refill comes after the case whose buffers it refills.
    for i, case in enumerate(out):
        if case.splice_from is not None:
            out[i] = replace(case, grad=out[case.splice_from].grad)
    return out
