"""The figures of one harness verdict that the keep rule compares and the run records.

With several timed shapes, a kernel's figure is call-weighted over them: each shape counts by its
share of the target's profiled time. With one, it is the primary shape's.
"""

from __future__ import annotations

from autokernel.harness.result import BenchResult
from autokernel.loop.state import Measurement
from autokernel.profiling.plan import Target
from autokernel.text import format_speedup


def timed_shapes(target: Target, max_shapes: int) -> list[list[int]]:
    """The shapes an experiment times: the primary one, then the other profiled shapes."""
    shapes = [list(target.bench_shape)]
    for shape in target.shapes:
        if list(shape) not in shapes:
            shapes.append(list(shape))
    return shapes[: max(1, max_shapes)]


def shape_weights(target: Target, shapes: list[list[int]]) -> dict[tuple[int, ...], float]:
    """Each timed shape's share of the target's profiled time (equal shares if unknown)."""
    time_at: dict[tuple[int, ...], float] = {}
    for site in target.call_sites:
        key = tuple(site.shape)
        time_at[key] = time_at.get(key, 0.0) + max(site.time_ms, 0.0)
    wanted = [tuple(s) for s in shapes]
    total = sum(time_at.get(s, 0.0) for s in wanted)
    if total <= 0:
        return {s: 1.0 / len(wanted) for s in wanted} if wanted else {}
    return {s: time_at.get(s, 0.0) / total for s in wanted}


def measure(result: BenchResult, experiment: int, commit: str,
            weights: dict[tuple[int, ...], float]) -> Measurement:
    """The figures the keep rule compares: call-weighted over the timed shapes when the harness
    timed several, else the primary shape's."""
    timings = [t for t in result.timings if tuple(t.shape) in weights]
    covered = {tuple(t.shape) for t in timings}
    latency, iqr = result.latency_us, result.iqr_us
    eager, compiled = result.eager_latency_us, result.compile_latency_us
    # One shape: the harness's own ratios. Weighted: ratios of the weighted times, computed here.
    vs_eager, vs_compile = result.speedup_vs_eager, result.speedup_vs_compile
    weighted_shapes = 1
    if len(covered) > 1 and covered == set(weights):
        weighted_shapes = len(covered)
        per_shape = {tuple(t.shape): t for t in timings}

        def weighted(attr: str) -> float | None:
            values = [getattr(per_shape[s], attr) for s in weights]
            if any(v is None for v in values):
                return None
            return sum(w * v for w, v in zip(weights.values(), values))

        latency, iqr = weighted("latency_us"), weighted("iqr_us")
        eager, compiled = weighted("eager_us"), weighted("compile_us")
        vs_eager = eager / latency if eager and latency else None
        vs_compile = compiled / latency if compiled and latency else None
    return Measurement(
        experiment=experiment,
        commit=commit,
        latency_us=latency,
        iqr_us=iqr,
        primary_latency_us=result.latency_us,
        eager_us=eager,
        compile_us=compiled,
        speedup_vs_eager=vs_eager,
        speedup_vs_compile=vs_compile,
        pct_peak=result.pct_peak_datasheet,
        pct_peak_measured=result.pct_peak_measured,
        passed=result.passed,
        shapes=weighted_shapes,
    )


def speedups_text(m: Measurement | None, best: Measurement | None = None) -> str:
    """"41.2 µs (1.18× best, 2.9× eager, 1.1× compile)"; with several timed shapes the figures
    are call-weighted over them, and say so."""
    if m is None or m.latency_us is None:
        return ""
    parts = [f"{m.latency_us:.1f} µs" + (f" weighted over {m.shapes} shapes" if m.shapes > 1
                                         else "")]
    inner = []
    if best is not None and best.latency_us:
        inner.append(f"{format_speedup(best.latency_us / m.latency_us)} best")
    if m.speedup_vs_eager is not None:
        inner.append(f"{format_speedup(m.speedup_vs_eager)} eager")
    if m.speedup_vs_compile is not None:
        inner.append(f"{format_speedup(m.speedup_vs_compile)} compile")
    if inner:
        parts.append(f"({', '.join(inner)})")
    return " ".join(parts)
