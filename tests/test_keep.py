"""The keep rule and its paired statistics: bound, reason text, the too-noisy path, shapes."""

from __future__ import annotations

import numpy as np
import pytest
from bench_results import passing_result

from autokernel.harness.paired import (
    NOISY_RELATIVE_WIDTH, PairedSpeedup, paired_speedup, round_ratios, too_noisy,
)
from autokernel.harness.result import BenchResult, ShapeTiming, Status
from autokernel.loop.keep import paired_vs_best, verdict_for
from autokernel.loop.measure import measure
from autokernel.loop.state import Measurement

BEST = Measurement(experiment=0, commit="c0", latency_us=100.0, iqr_us=1.0)


def _ratios(center: float, spread: float, rounds: int = 60, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(center * (1.0 + spread * rng.standard_normal(rounds)))


def _result(*shapes: tuple[list[int], list[float]], retimed: bool = False,
            incumbent_us: float = 100.0) -> BenchResult:
    timings = [ShapeTiming(shape=shape, dtype="fp16", latency_us=incumbent_us / float(
        np.median(ratios)), iqr_us=1.0, incumbent_us=incumbent_us, paired_ratios=ratios,
        retimed=retimed) for shape, ratios in shapes]
    return BenchResult(status=Status.PASS, timings=timings)


def _verdict(result: BenchResult, weights: dict[tuple[int, ...], float] | None = None,
             min_gain: float = 0.01):
    weights = weights or {tuple(t.shape): 1.0 / len(result.timings) for t in result.timings}
    return verdict_for(result, measure(result, 1, "", weights), BEST, min_gain, weights)


def test_round_ratios_pair_rounds_by_index() -> None:
    assert round_ratios([10.0, 20.0, 30.0], [5.0, 20.0, 60.0]) == [2.0, 1.0, 0.5]
    assert round_ratios([10.0, 0.0], [5.0, 1.0]) == [2.0]  # a zero time is no sample


def test_interval_brackets_the_median_and_narrows_with_rounds() -> None:
    few = paired_speedup([_ratios(1.2, 0.05, rounds=20)])
    many = paired_speedup([_ratios(1.2, 0.05, rounds=400)])
    assert few is not None and many is not None
    assert few.low < few.estimate < few.high
    assert many.high - many.low < few.high - few.low
    assert many.low < 1.2 < many.high
    assert paired_speedup([[1.1, 1.2]]) is None  # too few rounds to judge


def test_shapes_combine_by_the_incumbents_time_share() -> None:
    # 3/4 of the incumbent's time sped up 2x, the rest unchanged: 1 / (0.75/2 + 0.25) = 1.6x.
    combined = paired_speedup([[2.0] * 10, [1.0] * 10], [0.75, 0.25])
    assert combined is not None and combined.estimate == pytest.approx(1.6)


def test_keep_when_the_lower_bound_clears_the_minimum_gain() -> None:
    verdict = _verdict(_result(([2048, 2048], _ratios(1.5, 0.02))))
    assert verdict.status == "keep"
    assert verdict.vs_best is not None and verdict.vs_best.low > 1.01
    assert "lower bound above 1.010×" in verdict.reason and "95% CI" in verdict.reason
    assert "needed" not in verdict.reason and "-" not in verdict.reason.split("CI")[0]


def test_a_kernel_against_itself_is_reverted_with_a_plain_reason() -> None:
    verdict = _verdict(_result(([2048, 2048], _ratios(1.0, 0.01))))
    assert verdict.status == "revert"
    assert "lower bound not above 1.010×" in verdict.reason
    assert verdict.vs_best is not None and verdict.vs_best.low < 1.0 < verdict.vs_best.high


def test_a_revert_that_launches_the_best_kernels_own_work_says_so() -> None:
    same = _result(([4096, 4096], _ratios(1.0, 0.01)))
    same.launch_digest = same.incumbent_launch_digest = "7f701e9216c6df6a"
    assert "launches exactly the best kernel's Triton kernels" in _verdict(same).reason
    other = _result(([4096, 4096], _ratios(1.0, 0.01)))
    other.launch_digest, other.incumbent_launch_digest = "3e880de12eed95b5", "7f701e9216c6df6a"
    assert "launches exactly" not in _verdict(other).reason
    unknown = _result(([4096, 4096], _ratios(1.0, 0.01)))  # no digests (an older worker)
    assert "launches exactly" not in _verdict(unknown).reason


def test_the_minimum_gain_holds_however_quiet_the_measurement() -> None:
    quiet = _result(([64, 64], _ratios(1.015, 0.001)))
    assert _verdict(quiet, min_gain=0.01).status == "keep"
    assert _verdict(quiet, min_gain=0.02).status == "revert"


def test_a_wide_interval_across_the_threshold_is_too_noisy() -> None:
    noisy = _result(([64, 64], _ratios(1.03, 0.25, rounds=30)), retimed=True)
    verdict = _verdict(noisy)
    assert verdict.status == "revert"
    assert verdict.reason.startswith("too noisy to judge after a re-time")
    assert verdict.vs_best is not None and verdict.vs_best.relative_width > NOISY_RELATIVE_WIDTH


def test_too_noisy_needs_both_width_and_a_straddle() -> None:
    assert too_noisy(PairedSpeedup(1.0, 0.9, 1.1, 20), 1.01)
    assert not too_noisy(PairedSpeedup(1.0, 0.995, 1.005, 20), 1.01)  # narrow: a clear no
    assert not too_noisy(PairedSpeedup(1.5, 1.3, 1.7, 20), 1.01)  # wide but clearly faster


def test_several_shapes_are_weighted_by_profiled_time() -> None:
    # Twice as fast at the shape holding 90% of the time, 5% slower at the other: keep.
    result = _result(([4096, 4096], _ratios(2.0, 0.01)), ([64, 64], _ratios(0.95, 0.01)))
    weights = {(4096, 4096): 0.9, (64, 64): 0.1}
    verdict = _verdict(result, weights)
    assert verdict.status == "keep"
    assert verdict.vs_best is not None
    assert verdict.vs_best.estimate == pytest.approx(1 / (0.9 / 2.0 + 0.1 / 0.95), rel=0.02)
    # The same figures with the weights swapped: the slowdown dominates.
    assert _verdict(result, {(4096, 4096): 0.02, (64, 64): 0.98}).status == "revert"


def test_without_paired_rounds_the_comparison_is_unpaired_and_says_so() -> None:
    result = passing_result(80.0, shape=[64], dtype="fp16")
    assert paired_vs_best(result, {(64,): 1.0}) is None
    verdict = _verdict(result)
    assert verdict.status == "keep" and "unpaired" in verdict.reason


def test_failures_and_first_passing_kernels() -> None:
    failed = BenchResult(status=Status.TIMEOUT, reason="hung")
    assert _verdict(failed).status == "timeout" and _verdict(failed).reason == "hung"
    first = _result(([64, 64], _ratios(0.5, 0.01)))
    weights = {(64, 64): 1.0}
    verdict = verdict_for(first, measure(first, 1, "", weights), None, 0.01, weights)
    assert verdict.status == "keep" and "first kernel" in verdict.reason
