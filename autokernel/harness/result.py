"""The harness's verdict: the contract between `autokernel bench`, the loop and the report."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar, overload


class Status(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"          # wrong results: stage, shape/dtype and max error in `reason`
    REJECTED = "REJECTED"  # static scan or a cheat detector fired: the rule in `reason`
    CRASH = "CRASH"        # exception, CUDA error or segfault: the message in `reason`
    TIMEOUT = "TIMEOUT"
    SKIPPED = "SKIPPED"    # not judged on this device (a CUDA C++ kernel on --device cpu)


@dataclass
class ShapeTiming:
    """Timing of candidate and baselines at one shape (same protocol, interleaved)."""

    shape: list[int]
    dtype: str
    latency_us: float
    iqr_us: float
    eager_us: float | None = None
    compile_us: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    pct_peak_datasheet: float | None = None
    pct_peak_measured: float | None = None
    samples: int = 0  # timed rounds per contestant (each the mean of calls_per_round calls)
    calls_per_round: int = 1
    eager_iqr_us: float | None = None
    compile_iqr_us: float | None = None
    compile_cached: bool = False  # compile_us comes from the run's baseline cache
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    throughput: float | None = None
    throughput_unit: str | None = None
    # Host launch cost: one synchronous call's wall time minus its device time (separate calls).
    launch_us: float | None = None
    eager_launch_us: float | None = None
    compile_launch_us: float | None = None
    # Against the incumbent (the current best kernel), timed in the same rounds.
    incumbent_us: float | None = None
    incumbent_launch_us: float | None = None
    paired_ratios: list[float] = field(default_factory=list)  # incumbent / candidate, per round
    vs_incumbent: float | None = None  # median paired speedup, with its 95% bootstrap interval
    vs_incumbent_lo: float | None = None
    vs_incumbent_hi: float | None = None
    retimed: bool = False  # too noisy after the first pass; timed again with more rounds
    liger_us: float | None = None  # Liger-Kernel's version of the op (blank: not installed)
    speedup_vs_liger: float | None = None


Figure = TypeVar("Figure")


class _PrimaryFigure(Generic[Figure]):
    """A BenchResult figure read from its primary ShapeTiming: the timing is the figure's one
    home, so the result cannot disagree with it. None when nothing was timed."""

    def __init__(self, timing_field: str | None = None) -> None:
        self.timing_field = timing_field

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.timing_field = self.timing_field or name

    @overload
    def __get__(self, result: None, owner: type) -> _PrimaryFigure[Figure]: ...

    @overload
    def __get__(self, result: BenchResult, owner: type) -> Figure | None: ...

    def __get__(self, result: BenchResult | None, owner: type) -> Any:
        if result is None:
            return self
        primary = result.primary
        return None if primary is None else getattr(primary, self.timing_field)

    def __set__(self, result: BenchResult, value: Any) -> None:
        raise AttributeError(f"BenchResult.{self.name} is read from timings[0]; set "
                             f"ShapeTiming.{self.timing_field} there instead")


@dataclass
class BenchResult:
    status: Status
    stage: str | None = None  # the stage that decided a non-PASS status, else None
    reason: str = ""
    detail: str = ""  # the failure's full text (traceback, compiler message), a few KB at most
    kernel_type: str | None = None
    backend: str | None = None
    device: str = "cuda"
    shapes: list[list[int]] = field(default_factory=list)  # timed shapes, primary first
    dtypes: list[str] = field(default_factory=list)
    peak_vram_mb: float | None = None
    harness_seconds: float | None = None
    timing_meaningful: bool = True  # False on the CPU interpreter
    timings: list[ShapeTiming] = field(default_factory=list)
    stages: dict[str, str] = field(default_factory=dict)  # stage name -> "pass"/"fail"/"skip"
    rule: str | None = None  # machine-readable cause of REJECTED, e.g. "library-fallback"
    correctness_dtypes: list[str] = field(default_factory=list)
    stage_cases: dict[str, int] = field(default_factory=dict)  # inputs checked per stage
    gpu: str | None = None  # device name as the worker saw it
    torch_version: str | None = None
    triton_version: str | None = None
    notes: list[str] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)  # the worker's time by phase
    sandbox: dict[str, Any] = field(default_factory=dict)  # OS confinement: applied / missing
    # What one call launches at the primary timed shape (compiled kernels, grids, scalars), for
    # the candidate and the incumbent: equal digests mean the same GPU work from Triton.
    launch_digest: str | None = None
    incumbent_launch_digest: str | None = None

    # The primary shape's figures (timings[0]), under the names readers and verdict files use.
    latency_us = _PrimaryFigure[float]()  # device-time median at the primary shape and dtype
    iqr_us = _PrimaryFigure[float]()
    launch_us = _PrimaryFigure[float]()  # host launch cost at the primary shape (eager's beside)
    eager_launch_us = _PrimaryFigure[float]()
    vs_incumbent = _PrimaryFigure[float]()  # paired speedup over the incumbent
    vs_incumbent_lo = _PrimaryFigure[float]()
    vs_incumbent_hi = _PrimaryFigure[float]()
    throughput = _PrimaryFigure[float]()
    throughput_unit = _PrimaryFigure[str]()  # "TFLOP/s" (compute-bound types) or "GB/s"
    tflops = _PrimaryFigure[float]()
    gbps = _PrimaryFigure[float]()
    pct_peak_datasheet = _PrimaryFigure[float]()  # roofline floor time / measured time, in %
    pct_peak_measured = _PrimaryFigure[float]()  # the same against the calibrated ceilings
    eager_latency_us = _PrimaryFigure[float]("eager_us")
    compile_latency_us = _PrimaryFigure[float]("compile_us")
    speedup_vs_eager = _PrimaryFigure[float]()
    speedup_vs_compile = _PrimaryFigure[float]()
    speedup_vs_liger = _PrimaryFigure[float]()  # blank unless liger-kernel is installed

    @property
    def primary(self) -> ShapeTiming | None:
        """The timing at the primary shape and dtype (shapes[0]), if anything was timed."""
        return self.timings[0] if self.timings else None

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    def primary_figures(self) -> dict[str, Any]:
        """The primary shape's figures by their BenchResult names, in declaration order."""
        return {name: getattr(self, name) for name in PRIMARY_FIGURES}

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for key, value in asdict(self).items():
            data[key] = value
            if key == "dtypes":  # where the flat figures stood when they were fields
                data.update(self.primary_figures())
        data["status"] = self.status.value
        # The "pct_peak (datasheet and measured)", as one object beside the flat fields.
        data["pct_peak"] = {"datasheet": self.pct_peak_datasheet,
                            "measured": self.pct_peak_measured}
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchResult:
        data = dict(data)
        data["status"] = Status(data["status"])
        data["timings"] = [ShapeTiming(**t) for t in data.get("timings", [])]
        if not data["timings"] and data.get("latency_us") is not None:
            data["timings"] = [_timing_from_flat_figures(data)]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


# BenchResult's derived figures: BenchResult name -> ShapeTiming field.
PRIMARY_FIGURES: dict[str, str] = {
    name: figure.timing_field or name for name, figure in vars(BenchResult).items()
    if isinstance(figure, _PrimaryFigure)}


def _timing_from_flat_figures(data: dict[str, Any]) -> ShapeTiming:
    """A verdict written before the figures moved to `timings` (an old workspace's state.json
    that `resume` reads): its flat primary figures as the one timing they came from."""
    shapes, dtypes = data.get("shapes") or [], data.get("dtypes") or []
    figures = {field_name: data.get(name) for name, field_name in PRIMARY_FIGURES.items()}
    return ShapeTiming(shape=list(shapes[0]) if shapes else [], dtype=dtypes[0] if dtypes else "",
                       **figures)
