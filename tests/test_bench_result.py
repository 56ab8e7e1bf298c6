"""BenchResult's primary-shape figures: read from timings[0], written out under their old keys."""

from __future__ import annotations

import json

import pytest

from autokernel.harness.result import PRIMARY_FIGURES, BenchResult, ShapeTiming, Status

# The keys of a verdict (verdicts/NNNN.json, state.json's best_result, `autokernel bench --json`)
# from before the figures moved into the timings: readers of old and new files rely on them.
VERDICT_KEYS = [
    "status", "stage", "reason", "detail", "kernel_type", "backend", "device", "shapes", "dtypes",
    "latency_us", "iqr_us", "launch_us", "eager_launch_us", "vs_incumbent", "vs_incumbent_lo",
    "vs_incumbent_hi", "throughput", "throughput_unit", "tflops", "gbps", "pct_peak_datasheet",
    "pct_peak_measured", "eager_latency_us", "compile_latency_us", "speedup_vs_eager",
    "speedup_vs_compile", "speedup_vs_liger", "peak_vram_mb", "harness_seconds",
    "timing_meaningful", "timings", "stages", "rule", "correctness_dtypes", "stage_cases", "gpu",
    "torch_version", "triton_version", "notes", "phase_seconds", "sandbox", "launch_digest",
    "incumbent_launch_digest", "pct_peak",
]
RENAMED = {"eager_latency_us": "eager_us", "compile_latency_us": "compile_us"}


def timed_result() -> BenchResult:
    # Each figure a distinct value, so a figure read from the wrong field shows.
    primary = ShapeTiming(
        shape=[64, 128], dtype="fp16", latency_us=10.0, iqr_us=0.5, eager_us=30.0,
        compile_us=20.0, tflops=1.5, gbps=900.0, pct_peak_datasheet=40.0, pct_peak_measured=45.0,
        speedup_vs_eager=3.0, speedup_vs_compile=2.0, throughput=900.0, throughput_unit="GB/s",
        launch_us=4.0, eager_launch_us=6.0, vs_incumbent=1.2, vs_incumbent_lo=1.1,
        vs_incumbent_hi=1.3, liger_us=25.0, speedup_vs_liger=2.5)
    other = ShapeTiming(shape=[32, 128], dtype="fp16", latency_us=7.0, iqr_us=0.25)
    return BenchResult(status=Status.PASS, kernel_type="softmax", shapes=[[64, 128], [32, 128]],
                       dtypes=["fp16", "fp16"], timings=[primary, other])


def test_the_figures_are_the_primary_timings_under_their_old_keys() -> None:
    result = timed_result()
    data = json.loads(result.to_json())
    assert list(data) == VERDICT_KEYS
    assert set(PRIMARY_FIGURES) == set(VERDICT_KEYS[9:27])
    primary = result.timings[0]
    for name in PRIMARY_FIGURES:
        expected = getattr(primary, RENAMED.get(name, name))
        assert getattr(result, name) == expected and data[name] == expected, name
    assert data["pct_peak"] == {"datasheet": 40.0, "measured": 45.0}
    assert BenchResult.from_dict(data) == result


def test_without_a_timing_every_figure_is_blank_and_cannot_be_set() -> None:
    result = BenchResult(status=Status.CRASH, stage="smoke", reason="boom")
    assert result.primary is None
    data = result.to_dict()
    assert list(data) == VERDICT_KEYS
    assert all(data[name] is None and getattr(result, name) is None for name in PRIMARY_FIGURES)
    assert BenchResult.from_dict(data) == result
    with pytest.raises(AttributeError, match="ShapeTiming.eager_us"):
        result.eager_latency_us = 3.0  # type: ignore[misc]


def test_an_old_verdict_with_flat_figures_and_no_timings_reads_the_same() -> None:
    """A CPU run's state.json in a workspace written before the move: `resume` reads it."""
    written = timed_result().to_dict()
    old = {key: value for key, value in written.items() if key != "timings"}
    read = BenchResult.from_dict(old)
    assert read.primary_figures() == timed_result().primary_figures()
    assert read.timings[0].shape == [64, 128] and read.timings[0].dtype == "fp16"

    bare = {"status": "PASS", "latency_us": 12.0, "iqr_us": 1.0, "speedup_vs_eager": 2.0,
            "timing_meaningful": False}
    read = BenchResult.from_dict(bare)
    assert (read.latency_us, read.iqr_us, read.speedup_vs_eager) == (12.0, 1.0, 2.0)
    assert read.timings[0].shape == [] and read.timings[0].dtype == ""
    assert BenchResult.from_dict({"status": "FAIL", "latency_us": None}).timings == []
