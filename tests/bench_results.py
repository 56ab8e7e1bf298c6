"""Harness verdicts for tests: a passing BenchResult whose figures live in its primary timing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autokernel.harness.result import BenchResult, ShapeTiming, Status

TIMING_FIELDS = frozenset(ShapeTiming.__dataclass_fields__)


def passing_result(latency_us: float, *, iqr_us: float = 1.0, shape: Sequence[int] | None = None,
                   dtype: str | None = None, **fields: Any) -> BenchResult:
    """A PASS timed at one shape. Each keyword names a ShapeTiming field (eager_us,
    speedup_vs_eager, pct_peak_measured, ...) or a BenchResult field (kernel_type, shapes, ...);
    the shape and dtype default to the result's first `shapes`/`dtypes`, else [1] and fp32."""
    timing_fields = {k: v for k, v in fields.items() if k in TIMING_FIELDS}
    result_fields = {k: v for k, v in fields.items() if k not in TIMING_FIELDS}
    shapes, dtypes = result_fields.get("shapes") or [[1]], result_fields.get("dtypes") or ["fp32"]
    timing = ShapeTiming(shape=list(shape if shape is not None else shapes[0]),
                         dtype=dtype or dtypes[0], latency_us=latency_us, iqr_us=iqr_us,
                         **timing_fields)
    return BenchResult(status=Status.PASS, timings=[timing], **result_fields)
