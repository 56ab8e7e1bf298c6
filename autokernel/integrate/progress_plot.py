"""progress.png: each target's progress in the figure the keep rule decides on.

The keep rule does not compare the latencies results.tsv lists at the primary shape. It times
the candidate and the best kernel in the same rounds, weights the timed shapes by their share of
the target's profiled time, and keeps only when the lower end of the 95% bootstrap interval of
that paired speedup (`vs_best_lo`) clears the best by `--min-gain`. Plotted in primary-shape
speedups, a reverted experiment could sit above the "best" line, because it was faster at one
shape, or on a run of lucky rounds, while the rule saw no gain beyond the noise.

So the plot's unit is "× the baseline" chained from the paired figures: the line starts at 1 at
the target's baseline, and each keep multiplies it by its `vs_best`. The line therefore rises at
every keep and nowhere else, and every other experiment sits at (line) × its own `vs_best`, with
its interval drawn, so a point above the line shows that its interval still reached below the
margin. Rows without a paired figure (an unpaired verdict, or a file written before the paired
columns) fall back to the ratio of the call-weighted latencies `objective_us`, and are drawn
hollow. `progress_series` computes what is drawn, so tests check the data, not pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autokernel.text import format_speedup

if TYPE_CHECKING:
    import pandas as pd

    from autokernel.integrate.report import RunReport

Y_LABEL = "× baseline (keep rule's figure)"
LINE_LABEL = "best: kept experiments, chained paired speedups"
CAPTION = (
    "The plot's unit is the keep rule's own figure: the speedup over the target's baseline, "
    "chained from each keep's paired speedup over the best before it (candidate and best timed "
    "in the same rounds, the timed shapes weighted by their share of the profiled time). A "
    "non-kept point is its paired speedup over the best at that time, with its 95% interval: "
    "the rule keeps only when the interval's low end clears the best by `--min-gain`, so a "
    "point above the line is a gain within the noise. Hollow points had no paired figure and "
    "use the ratio of `objective_us`. The Targets table's vs baseline is another figure, the "
    "ratio of two latencies at one shape, so the two can differ on noisy timings."
)
COMMITTED = ("baseline", "keep")


@dataclass(frozen=True)
class ProgressPoint:
    experiment: int
    status: str
    phase: str  # "" in files written before the phase column
    passed: bool
    level: float | None  # × the baseline; None for a failure or a row with no figure
    low: float | None = None  # the level at the ends of the paired 95% interval
    high: float | None = None
    paired: bool = True  # False: from the ratio of objective_us (no paired rounds)


@dataclass(frozen=True)
class ProgressSeries:
    points: list[ProgressPoint]
    best_steps: list[tuple[int, float]]  # (experiment, level) at each kept point, then the end
    eager_level: float | None  # eager PyTorch on the same axis, from the baseline's timing
    compile_level: float | None

    @property
    def best_level(self) -> float | None:
        return self.best_steps[-1][1] if self.best_steps else None


def _number(row: Any, column: str) -> float | None:
    value = row.get(column) if hasattr(row, "get") else None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def progress_series(rows: pd.DataFrame) -> ProgressSeries:
    """The points and best line of one target's rows of results.tsv, in experiment order."""
    points: list[ProgressPoint] = []
    steps: list[tuple[int, float]] = []
    level: float | None = None  # the best kernel's figure, × the baseline
    best_objective: float | None = None
    eager_level = compile_level = None
    for _, row in rows.sort_values("experiment").iterrows():
        experiment = int(row["experiment"])
        status = str(row.get("status", ""))
        phase = str(row.get("phase", "") or "")
        passed = str(row.get("correctness", "")) == "PASS"
        objective = _number(row, "objective_us") or _number(row, "latency_us")
        vs_best = _number(row, "vs_best")
        if not passed:
            points.append(ProgressPoint(experiment, status, phase, False, None))
            continue
        if status in COMMITTED:
            if level is None:  # the baseline, or the first passing kernel after a failed one
                level, paired = 1.0, True
                eager_level = _inverse(_number(row, "speedup_vs_pytorch"))
                compile_level = _inverse(_number(row, "speedup_vs_compile"))
            elif vs_best is not None:
                level, paired = level * vs_best, True
            else:
                ratio = best_objective / objective if best_objective and objective else 1.0
                # An unpaired keep beat the best's recorded time by more than the margin; the
                # guard only matters for rows whose figures were lost or edited by hand.
                level, paired = level * max(ratio, 1.0), False
            best_objective = objective
            points.append(ProgressPoint(experiment, status, phase, True, level, paired=paired))
            steps.append((experiment, level))
            continue
        if level is None:
            points.append(ProgressPoint(experiment, status, phase, True, None))
        elif vs_best is not None:
            low, high = _number(row, "vs_best_lo"), _number(row, "vs_best_hi")
            points.append(ProgressPoint(
                experiment, status, phase, True, level * vs_best,
                low=level * low if low is not None else None,
                high=level * high if high is not None else None))
        elif best_objective and objective:
            points.append(ProgressPoint(experiment, status, phase, True,
                                        level * best_objective / objective, paired=False))
        else:
            points.append(ProgressPoint(experiment, status, phase, True, None))
    if steps and points:
        steps.append((points[-1].experiment, steps[-1][1]))  # carried to the last experiment
    return ProgressSeries(points, steps, eager_level, compile_level)


def _inverse(speedup: float | None) -> float | None:
    return 1.0 / speedup if speedup else None


def plot_progress(report: RunReport, path: Path) -> Path:
    """One panel per target: the keep rule's figure against experiment number."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    frame = report.frame
    targets = report.targets or []
    figure = Figure(figsize=(10, 2.6 * max(1, len(targets)) + 0.6), dpi=120)
    axes = figure.subplots(max(1, len(targets)), 1, squeeze=False)[:, 0]
    for axis, target in zip(axes, targets):
        series = progress_series(frame[frame["tag"] == target.tag])
        if not series.points:  # a target the run has not reached (Ctrl-C): nothing to draw
            axis.set_title(f"{target.tag} ({target.shape} {target.dtype}): not started yet",
                           fontsize=9, loc="left")
            axis.set_yticks([])
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
            continue
        placed = [p for p in series.points if p.level is not None]
        kept = [p for p in placed if p.status in COMMITTED]
        others = [p for p in placed if p.status not in COMMITTED]
        failed = [p for p in series.points if not p.passed]
        if series.best_steps:
            xs, ys = zip(*series.best_steps)
            axis.step(xs, ys, where="post", color="tab:green", linewidth=1.2, label=LINE_LABEL)
        for paired, face in ((True, "0.55"), (False, "none")):
            group = [p for p in others if p.paired is paired]
            if not group:
                continue
            with_interval = [p for p in group if p.low is not None and p.high is not None]
            if with_interval:
                axis.vlines([p.experiment for p in with_interval],
                            [p.low for p in with_interval], [p.high for p in with_interval],
                            color="0.75", linewidth=0.8)
            axis.scatter([p.experiment for p in group], [p.level for p in group], s=14,
                         facecolors=face, edgecolors="0.45",
                         label="not kept (bar: 95% interval)" if paired
                         else "not kept, unpaired (objective_us ratio)")
        if kept:
            axis.scatter([p.experiment for p in kept], [p.level for p in kept], s=46, marker="*",
                         color="tab:green", zorder=3, label="kept (baseline, keeps)")
        references = [(series.eager_level, "tab:blue", "--", "eager PyTorch (baseline's timing)"),
                      (series.compile_level, "tab:purple", ":", "torch.compile")]
        for level, color, style, label in references:
            if level is not None:
                axis.axhline(level, color=color, linestyle=style, linewidth=1, label=label)
        values = [p.level for p in placed] + [v for v, *_ in references if v is not None]
        values += [p.low for p in others if p.low is not None]
        low = min(values) if values else 1.0
        high = max(values) if values else 1.0
        if low > 0 and high / low > 20:  # e.g. the CPU interpreter's figures next to eager
            axis.set_yscale("log")
        if failed:
            axis.scatter([p.experiment for p in failed], [low] * len(failed), marker="x", s=18,
                         color="tab:red", label="failed (at the floor)")
        best = series.best_level
        axis.set_title(f"{target.tag} ({target.shape} {target.dtype}): best "
                       f"{'–' if best is None else f'{best:.2f}×'} the baseline by the keep "
                       f"rule's figure; {format_speedup(target.speedup_vs_eager)} eager at the "
                       "primary shape", fontsize=9, loc="left")
        axis.set_ylabel(Y_LABEL, fontsize=8)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:  # matplotlib warns on a legend of nothing
            axis.legend(fontsize=7, loc="best")
    axes[-1].set_xlabel("experiment")
    title = f"autokernel {report.run_tag}"
    if not report.timing_meaningful:
        title += " (CPU interpreter: timings not meaningful)"
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path)
    return path
