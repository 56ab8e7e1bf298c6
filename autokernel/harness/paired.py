"""A candidate against the incumbent, timed in the same rounds: the speedup and its 95% interval.

Each timing round runs the candidate and the incumbent back to back (in an order rotated every
round), so whatever drifts between rounds (clocks, temperature, other tenants) hits both; the
per-round ratio incumbent / candidate cancels it. The figure is the median of those ratios, and its
interval a percentile bootstrap over rounds (`scipy.stats.bootstrap`), which assumes nothing about
the distribution: timings are skewed and, when something goes wrong, bimodal.

Several timed shapes combine the way the loop's objective does. With w_s the shape's share of
the target's profiled time and I_s the incumbent's median there, a_s = w_s I_s / sum(w I) is the
share of the incumbent's weighted time spent at s; replacing it scales that time by 1 / r_s, so the
combined speedup is 1 / sum(a_s / r_s). Each shape's rounds are resampled on their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
# An interval wider than this fraction of its estimate cannot tell a few-percent gain from noise:
# such a measurement is re-timed once with more rounds before anything is decided on it.
NOISY_RELATIVE_WIDTH = 0.05
MIN_ROUNDS_TO_JUDGE = 3


@dataclass(frozen=True)
class PairedSpeedup:
    """How much faster the candidate is than the incumbent (> 1: faster), with its interval."""

    estimate: float
    low: float
    high: float
    rounds: int  # paired rounds behind the figure (the fewest over the shapes)

    @property
    def relative_width(self) -> float:
        return (self.high - self.low) / self.estimate if self.estimate > 0 else float("inf")

    def text(self) -> str:
        return (f"{self.estimate:.3f}× (95% CI {self.low:.3f}–{self.high:.3f}×, "
                f"{self.rounds} rounds)")


def round_ratios(incumbent_us: Sequence[float], candidate_us: Sequence[float]) -> list[float]:
    """incumbent / candidate for each round both were timed in (rounds line up by index)."""
    return [i / c for i, c in zip(incumbent_us, candidate_us) if c > 0 and i > 0]


def paired_speedup(ratios_by_shape: Sequence[Sequence[float]],
                   shares: Sequence[float] | None = None, *, confidence: float = CONFIDENCE,
                   resamples: int = RESAMPLES, seed: int = 0) -> PairedSpeedup | None:
    """The combined median speedup and its bootstrap interval; None when a shape has fewer than
    MIN_ROUNDS_TO_JUDGE rounds. `shares` are the a_s of the module docstring (default: equal)."""
    from scipy.stats import bootstrap

    samples = [np.asarray(r, dtype=np.float64) for r in ratios_by_shape]
    if not samples or any(len(s) < MIN_ROUNDS_TO_JUDGE for s in samples):
        return None
    weights = np.asarray(shares if shares is not None else [1.0] * len(samples), dtype=np.float64)
    weights = weights / weights.sum()

    def combined(*ratios: np.ndarray, axis: int = -1) -> np.ndarray:
        slowdown = sum(w / np.median(r, axis=axis) for w, r in zip(weights, ratios))
        return 1.0 / slowdown

    estimate = float(combined(*samples))
    if all(np.ptp(s) == 0 for s in samples):  # no spread: the bootstrap has nothing to resample
        return PairedSpeedup(estimate, estimate, estimate, min(len(s) for s in samples))
    options = dict(vectorized=True, paired=False, confidence_level=confidence,
                   n_resamples=resamples, method="percentile")
    try:
        result = bootstrap(samples, combined, rng=np.random.default_rng(seed), **options)
    except TypeError:  # scipy < 1.15 names the generator random_state
        result = bootstrap(samples, combined, random_state=np.random.default_rng(seed), **options)
    interval = result.confidence_interval
    return PairedSpeedup(estimate, float(interval.low), float(interval.high),
                         min(len(s) for s in samples))


def too_noisy(speedup: PairedSpeedup, threshold: float) -> bool:
    """The interval is wide and straddles the threshold: more rounds could change the verdict."""
    return (speedup.relative_width > NOISY_RELATIVE_WIDTH
            and speedup.low <= threshold < speedup.high)
