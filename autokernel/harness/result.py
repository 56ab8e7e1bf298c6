"""The harness's verdict: the contract between `autokernel bench`, the loop and the report."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


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
    latency_us: float | None = None  # device-time median at the primary shape and dtype
    iqr_us: float | None = None
    launch_us: float | None = None  # host launch cost at the primary shape (eager's beside it)
    eager_launch_us: float | None = None
    vs_incumbent: float | None = None  # paired speedup over the incumbent at the primary shape
    vs_incumbent_lo: float | None = None
    vs_incumbent_hi: float | None = None
    throughput: float | None = None
    throughput_unit: str | None = None  # "TFLOP/s" (compute-bound types) or "GB/s"
    tflops: float | None = None
    gbps: float | None = None
    pct_peak_datasheet: float | None = None  # roofline floor time / measured time, in %
    pct_peak_measured: float | None = None  # the same against the calibrated ceilings
    eager_latency_us: float | None = None
    compile_latency_us: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    speedup_vs_liger: float | None = None  # blank unless liger-kernel is installed
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

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
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
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})
