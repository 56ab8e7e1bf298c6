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


@dataclass
class BenchResult:
    status: Status
    stage: str | None = None  # the stage that decided a non-PASS status, else None
    reason: str = ""
    kernel_type: str | None = None
    backend: str | None = None
    device: str = "cuda"
    shapes: list[list[int]] = field(default_factory=list)  # timed shapes, primary first
    dtypes: list[str] = field(default_factory=list)
    latency_us: float | None = None  # median at the primary shape and dtype
    iqr_us: float | None = None
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
    peak_vram_mb: float | None = None
    harness_seconds: float | None = None
    timing_meaningful: bool = True  # False on the CPU interpreter
    timings: list[ShapeTiming] = field(default_factory=list)
    stages: dict[str, str] = field(default_factory=dict)  # stage name -> "pass"/"fail"/"skip"

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
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
