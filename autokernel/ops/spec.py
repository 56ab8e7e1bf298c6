"""What the registry knows about one kernel type: `OpSpec`.

Every consumer (starters' tests, the harness, the profiler, the loop's pct-of-peak rule, the report)
reads the same entry, so a kernel type's reference, inputs, formulas and tolerances live in exactly
one place: `autokernel/ops/<kernel_type>.py`.

Shapes are plain int tuples named by `OpSpec.dims` (softmax: ("M", "N") for x[M, N]). Inputs are the
positional arguments of the reference, tensors and Python scalars alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import functools

import torch

Shape = tuple[int, ...]
Inputs = tuple[Any, ...]

DTYPES: dict[str, torch.dtype] = {
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp32": torch.float32,
}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()} | {torch.float64: "fp64"}

# Distributions every op's generator understands. "uniform" is signed, "positive" is non-negative.
DISTRIBUTIONS: tuple[str, ...] = ("normal", "uniform", "positive", "large")


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    aliases = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32",
               "float": "fp32"}
    key = aliases.get(name.lower(), name.lower())
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose one of: {', '.join(DTYPES)}")
    return DTYPES[key]


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class Tolerance:
    """An element passes when |out - ref| <= atol + rtol * |ref| (torch.allclose's rule)."""

    atol: float
    rtol: float


DEFAULT_TOLERANCES: Mapping[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-4, rtol=1e-4),
    torch.float16: Tolerance(atol=1e-2, rtol=1e-2),
    torch.bfloat16: Tolerance(atol=2e-2, rtol=2e-2),
}

InputMaker = Callable[..., Inputs]
"""make_inputs(shape, dtype, device, generator, distribution="normal", **params) -> Inputs"""


@dataclass(frozen=True)
class AdversarialCase:
    """An input pattern that breaks careless kernels (stage 3 of the harness)."""

    name: str
    description: str
    make_inputs: InputMaker  # same signature as OpSpec.make_inputs (distribution is ignored)
    # Some outputs are NaN/Inf by design (a NaN in a reduced row): the harness then checks that
    # the kernel's non-finite outputs are exactly the reference's, as it does for any output.
    nonfinite_reference: bool = False


@dataclass(frozen=True)
class AtenRule:
    """How the profiler reads a call of one aten op as a call of this kernel type."""

    extract: Callable[..., Any]
    """(op call, profiling.callsites.Context) -> ({dim: size}, {param: value}), or None when the
    shape cannot be read (the call is still this type's, at no shape)."""
    root_only: bool = False
    """Only when Python called the op itself, not inside another op (aten::mean's inner sum)."""
    role: Callable[..., str] | None = None
    """(op call, Context) -> which of the type's targets the call belongs to, for a type with
    several (matmul's "linear", "batched", "gemm"); None: the type has one."""


@dataclass(frozen=True)
class OpSpec:
    name: str
    dims: tuple[str, ...]
    reference: Callable[..., torch.Tensor]
    stock: Callable[..., torch.Tensor]
    """The fastest stock PyTorch path with the reference's signature (e.g. F.rms_norm, SDPA)."""
    make_inputs: InputMaker
    flops: Callable[[Shape], float]
    bytes: Callable[[Shape, torch.dtype], float]
    """Minimum device-memory traffic: each input read once, each output written once."""
    compute_bound: bool
    smoke_shape: Shape
    sweep: tuple[Shape, ...]
    """Default GPU shape sweep (8-10 shapes, realistic sizes)."""
    cpu_sweep: tuple[Shape, ...]
    """Shape sweep small enough for the Triton interpreter (seconds, not minutes)."""
    edge_shapes: tuple[Shape, ...]
    """Non-power-of-two dims (1023, 4097, 1537) and 1-row / 1-column cases, at GPU sizes."""
    cpu_edge_shapes: tuple[Shape, ...]
    bench_shapes: tuple[Shape, ...]
    """2-3 realistic shapes for baseline tables and for `autokernel bench` without --shapes."""
    adversarial: tuple[AdversarialCase, ...]
    tolerances: Mapping[torch.dtype, Tolerance] = field(
        default_factory=lambda: dict(DEFAULT_TOLERANCES)
    )
    dtypes: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32)
    notes: str = ""
    """Conventions worth printing next to a figure (e.g. how causal attention FLOPs are counted)."""
    liger: Callable[[], Callable[..., torch.Tensor] | None] | None = None
    """The op in Liger-Kernel (the best open-source Triton kernels), with the reference's
    signature: a third baseline, timed when `liger-kernel` is installed (None: not installed)."""
    aten_ops: Mapping[str, AtenRule] = field(default_factory=dict)
    """The aten ops the profiler classifies as this kernel type (one type per aten op)."""
    patterns: tuple[Callable[..., None], ...] = ()
    """Multi-op patterns, (profiling.callsites.Context) -> None, that claim ops as calls of this
    type, run in this order. A type with patterns must be named in
    autokernel/profiling/patterns.PATTERN_ORDER, which says when they run relative to the other
    types' (an earlier pattern claims its ops first)."""
    graph_patterns: tuple[Callable[..., None], ...] = ()
    """Patterns over the recorded data-flow graph, (profiling.graph_match.GraphContext) -> None,
    that claim calls as calls of this type whatever their spelling; run in
    autokernel/profiling/patterns.GRAPH_PATTERN_ORDER on profiles that recorded a graph (the
    `patterns` above run on those that did not)."""
    site_route: Callable[..., str] | None = None
    """(profiling.callsites.SiteKey, the type of the module the site was called in or None, the
    profile's {path: ModuleInfo}) -> how verify would splice a kernel in at this call site, in
    profiling/site_routes.py's words, or "no: why" (the plan's route column). None: the router
    intercepts the type's torch call wherever it is made ("call")."""
    param_mismatch: Callable[..., str | None] | None = None
    """(a site's params, its shape, the params the target's kernel is verified with) -> "no: why"
    where verify would refuse the site for a param the kernel may bake in (a norm's eps), else
    None. None: the type has no such param."""
    op_tolerances: Callable[[Mapping[str, Any]], Mapping[torch.dtype, Tolerance] | None] | None \
        = None
    """(a target's params) -> its tolerances where they are not `tolerances`, else None: reduce's
    amax is exact and its mean far tighter than a sum (`tolerances_for`)."""
    axis_dim: str | None = None
    """For ops that also run over a dim that is not the last (reduce, softmax, rmsnorm): the name
    of an optional trailing shape dim, the inner size K. A shape (M, N, K) with K > 1 is x[M, N, K]
    over dim 1 (any tensor over dim d, viewed as [prod(before d), size of d, prod(after d)]), and
    the inputs end with the axis argument 1; (M, N) and (M, N, 1) are over the last dim, as
    before. See `along_axis`."""
    outputs: int = 1
    """How many tensors the reference (and a kernel) returns: 1, a tensor; more, a tuple of that
    many (add_rmsnorm's (y, h)). The harness checks each output as it checks a single one."""
    cancelling: bool = False
    """Each output element is computed through a sum whose terms may cancel: a contracted dim
    (matmul's K, an MLP's hidden dim, a reduction's row) or a formula (GELU's 1 + erf(x/sqrt 2)
    in the negative tail). An honest kernel's error then scales with the terms' magnitudes, not
    with the output's, so the harness's row rule (`harness/compare.py`), a bound relative to
    the row's own mass, would fail honest kernels on rows that cancel to near zero: for these
    types it is not applied, and the element rule's atol is the floor (an all-zero row or
    output still fails)."""

    @property
    def shape_dims(self) -> tuple[str, ...]:
        """`dims`, and the axis dim where the op has one: every name a shape may use."""
        return self.dims + ((self.axis_dim,) if self.axis_dim else ())

    def inner(self, shape: Shape) -> int:
        """K of a shape with an axis dim (1 when absent): 1 is over the last dim."""
        return int(shape[len(self.dims)]) if len(shape) > len(self.dims) else 1

    def tolerances_for(self, params: Mapping[str, Any] | None = None
                       ) -> Mapping[torch.dtype, Tolerance]:
        """The tolerances a target with these params is checked with."""
        special = self.op_tolerances(params or {}) if self.op_tolerances else None
        return self.tolerances if special is None else special

    def tolerance(self, dtype: torch.dtype, params: Mapping[str, Any] | None = None
                  ) -> Tolerance:
        return self.tolerances_for(params)[dtype]

    def parse_shape(self, text: str | Shape) -> Shape:
        """'4096x4096' or (4096, 4096) -> (4096, 4096), checked against `dims`."""
        if isinstance(text, str):
            parts = [p for p in text.lower().replace(",", "x").split("x") if p]
            shape = tuple(int(p) for p in parts)
        else:
            shape = tuple(int(d) for d in text)
        lengths = {len(self.dims), len(self.shape_dims)}
        if len(shape) not in lengths or any(d <= 0 for d in shape):
            optional = f", optionally x{self.axis_dim} (over dim 1)" if self.axis_dim else ""
            raise ValueError(
                f"{self.name} shapes have {len(self.dims)} positive dims "
                f"({'x'.join(self.dims)}{optional}); got {text!r}"
            )
        return shape

    def format_shape(self, shape: Shape) -> str:
        return " ".join(f"{n}={d}" for n, d in zip(self.shape_dims, shape))

    def arithmetic_intensity(self, shape: Shape, dtype: torch.dtype) -> float:
        return self.flops(shape) / self.bytes(shape, dtype)


def sample(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
    distribution: str = "normal",
    large_scale: float = 1e3,
) -> torch.Tensor:
    """Random tensor from one of DISTRIBUTIONS, drawn in float32 then cast (never all zeros).

    `large_scale` is the magnitude of the "large" distribution; ops pick one that keeps the
    reference's output finite in every dtype they support.
    """
    if distribution == "normal":
        t = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    elif distribution == "uniform":
        t = torch.rand(shape, generator=generator, device=device, dtype=torch.float32) * 2 - 1
    elif distribution == "positive":
        t = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
    elif distribution == "large":
        t = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
        t = t * large_scale
    else:
        raise ValueError(f"unknown distribution {distribution!r}; choose from {DISTRIBUTIONS}")
    return t.to(dtype)


def rows_and_width(shape: Shape) -> tuple[int, int]:
    """(rows, N) of a row-wise op's (M, N[, K]) shape: M·K independent rows of N elements, laid
    out contiguously (K = 1) or K apart (over dim 1 of x[M, N, K])."""
    m, n = shape[0], shape[1]
    return m * (shape[2] if len(shape) > 2 else 1), n


def along_axis(maker: InputMaker) -> InputMaker:
    """An (M, N) input maker extended to (M, N, K) shapes, for an OpSpec with an axis dim.

    At K = 1 (or no K) it is `maker` itself. At K > 1 it makes `maker`'s inputs at (M·K, N) and
    lays the first tensor's rows out as x[M, N, K], each row now strided K apart over dim 1, so
    every row property a generator builds (an adversarial pattern, a scale) holds along the
    reduced dim; the inputs gain the reference's trailing axis argument, 1.
    """
    @functools.wraps(maker)  # inspect.signature sees maker's named options (eps)
    def make(shape: Shape, dtype: torch.dtype, device: str | torch.device,
             generator: torch.Generator, distribution: str = "normal", **params: Any) -> Inputs:
        # A plan's `axis` (the model's dim) is the reference's argument; the shape's K already
        # says which layout to make, so it is not the maker's.
        params.pop("axis", None)
        if len(shape) < 3 or shape[2] == 1:
            return maker(tuple(shape[:2]), dtype, device, generator, distribution, **params)
        m, n, k = shape
        inputs = maker((m * k, n), dtype, device, generator, distribution, **params)
        x = inputs[0].view(m, k, n).transpose(1, 2).contiguous()
        return (x, *inputs[1:], 1)

    return make
