"""The keep rule: is a candidate faster than the current best beyond doubt?

The harness times the candidate and the current best (the incumbent) in the same worker, on the
same inputs, in the same rounds (`autokernel.harness.paired`). Per round the ratio incumbent /
candidate cancels whatever drifted between rounds; over the timed shapes the ratios combine like the
objective (each shape weighted by its share of the target's profiled time).

- **keep** when the lower bound of the 95% bootstrap interval of the median paired speedup exceeds
  1 + `min_gain` (default 1%);
- **revert** otherwise. When the interval is wide and straddles that threshold, the harness already
  re-timed the shape once with more rounds; if it is still wide, the reason says the measurement was
  too noisy to judge.

Without paired rounds (the incumbent no longer loads or runs), the candidate's device time is
compared with the best's recorded one, and must beat it by `min_gain` plus the two measurements'
combined spread; the reason says the comparison was unpaired.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autokernel.harness.paired import PairedSpeedup, paired_speedup, too_noisy
from autokernel.harness.result import BenchResult, Status
from autokernel.loop.state import Measurement

VERDICT_OF_STATUS = {
    Status.FAIL: "fail",
    Status.CRASH: "crash",
    Status.TIMEOUT: "timeout",
    Status.REJECTED: "rejected",
    # Never judged on this device (a CUDA kernel on --device cpu): never kept; the row's
    # correctness column says SKIPPED and the reason says why.
    Status.SKIPPED: "rejected",
}


@dataclass(frozen=True)
class KeepVerdict:
    status: str  # results.tsv's status: keep, revert, fail, crash, timeout, rejected
    reason: str
    vs_best: PairedSpeedup | None = None


def paired_vs_best(result: BenchResult,
                   weights: dict[tuple[int, ...], float]) -> PairedSpeedup | None:
    """The candidate's speedup over the incumbent, over every timed shape with paired rounds."""
    paired = [t for t in result.timings
              if t.paired_ratios and t.incumbent_us and tuple(t.shape) in weights]
    if not paired:
        return None
    time_shares = [weights[tuple(t.shape)] * t.incumbent_us for t in paired]
    return paired_speedup([t.paired_ratios for t in paired], time_shares)


def verdict_for(result: BenchResult, new: Measurement, best: Measurement | None,
                min_gain: float, weights: dict[tuple[int, ...], float]) -> KeepVerdict:
    """The verdict on a non-baseline experiment, and the one-line reason results.tsv records."""
    if not result.passed:
        return KeepVerdict(VERDICT_OF_STATUS.get(result.status, "fail"), result.reason)
    if new.latency_us is None:
        return KeepVerdict("revert", "passed, but the harness returned no timing")
    if best is None or not best.passed or best.latency_us is None:
        return KeepVerdict("keep", "the first kernel of this target that passes")
    threshold = 1.0 + min_gain
    speedup = paired_vs_best(result, weights)
    if speedup is None:
        return _unpaired_verdict(new, best, min_gain)
    if speedup.low > threshold:
        return KeepVerdict("keep", f"{speedup.text()} the best; lower bound above "
                           f"{threshold:.3f}×", speedup)
    if too_noisy(speedup, threshold):
        retimed = any(t.retimed for t in result.timings)
        return KeepVerdict("revert", f"too noisy to judge{' after a re-time' if retimed else ''}: "
                           f"{speedup.text()} the best straddles {threshold:.3f}×"
                           f"{_same_launches(result)}", speedup)
    return KeepVerdict("revert", f"{speedup.text()} the best; lower bound not above "
                       f"{threshold:.3f}×{_same_launches(result)}", speedup)


def _same_launches(result: BenchResult) -> str:
    """Said of a revert whose Triton launches at the primary shape are the best kernel's own:
    the edit changed nothing the GPU runs there (a tunable that this shape never reads)."""
    if result.launch_digest and result.launch_digest == result.incumbent_launch_digest:
        return "; it launches exactly the best kernel's Triton kernels at the primary shape"
    return ""


def _unpaired_verdict(new: Measurement, best: Measurement, min_gain: float) -> KeepVerdict:
    assert new.latency_us is not None and best.latency_us is not None
    spread = math.hypot(new.iqr_us or 0.0, best.iqr_us or 0.0) / best.latency_us
    needed = 1.0 + min_gain + spread
    ratio = best.latency_us / new.latency_us
    status = "keep" if ratio > needed else "revert"
    return KeepVerdict(status, f"{ratio:.3f}× the best's recorded time (unpaired: the incumbent "
                       f"was not timed alongside; needed > {needed:.3f}×, the minimum gain plus "
                       "both measurements' spread)")
