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

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autokernel.loop.keep_figure import COMMITTED, KeepChain, number
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
    "use the ratio of `objective_us`. The Targets table's × baseline is the same figure. Eager "
    "PyTorch and torch.compile are marked lines on the same scale (from the baseline's timing "
    "at the primary shape); one far off the data is named at the panel's edge instead."
)
# The y-axis follows the data; a reference line further than this factor beyond it would
# squash the data (the CPU interpreter runs ~1000× slower than eager), so it is named instead.
REFERENCE_REACH = 3.0
LOG_SCALE_SPAN = 20.0  # data spanning more than this factor is drawn on a log axis


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


def progress_series(rows: pd.DataFrame) -> ProgressSeries:
    """The points and best line of one target's rows of results.tsv, in experiment order, in
    the keep rule's figure chained as `KeepChain` chains it (the report's table reads the same)."""
    points: list[ProgressPoint] = []
    steps: list[tuple[int, float]] = []
    chain = KeepChain()
    eager_level = compile_level = None
    for _, frame_row in rows.sort_values("experiment").iterrows():
        row = frame_row.to_dict()
        experiment = int(row["experiment"])
        status = str(row.get("status", ""))
        phase = str(row.get("phase", "") or "")
        if phase == "nan":
            phase = ""
        vs_best = number(row, "vs_best")
        before = chain.level(str(row.get("tag")))
        level = chain.add(row)
        if str(row.get("correctness", "")) != "PASS":
            points.append(ProgressPoint(experiment, status, phase, False, None))
            continue
        if status in COMMITTED:
            assert level is not None
            if before is None:
                eager_level = _inverse(number(row, "speedup_vs_pytorch"))
                compile_level = _inverse(number(row, "speedup_vs_compile"))
            paired = before is None or vs_best is not None
            points.append(ProgressPoint(experiment, status, phase, True, level, paired=paired))
            steps.append((experiment, level))
            continue
        if level is not None and vs_best is not None and before is not None:
            low, high = number(row, "vs_best_lo"), number(row, "vs_best_hi")
            points.append(ProgressPoint(
                experiment, status, phase, True, level,
                low=before * low if low is not None else None,
                high=before * high if high is not None else None))
        else:
            points.append(ProgressPoint(experiment, status, phase, True, level,
                                        paired=level is None))
    if steps and points:
        steps.append((points[-1].experiment, steps[-1][1]))  # carried to the last experiment
    return ProgressSeries(points, steps, eager_level, compile_level)


def _inverse(speedup: float | None) -> float | None:
    return 1.0 / speedup if speedup else None


def plot_progress(report: RunReport, path: Path) -> Path:
    """progress.png: `progress_figure`, saved at `path`."""
    progress_figure(report).savefig(path)
    return path


def progress_figure(report: RunReport) -> Any:
    """One panel per target: the keep rule's figure against experiment number, one legend for
    the figure (a matplotlib Figure)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    frame = report.frame
    targets = report.targets or []
    panels = max(1, len(targets))
    figure = Figure(figsize=(10, 2.6 * panels + 1.2), dpi=120)
    axes = figure.subplots(panels, 1, squeeze=False)[:, 0]
    legend: dict[str, Any] = {}
    for axis, target in zip(axes, targets):
        series = progress_series(frame[frame["tag"] == target.tag])
        _draw_panel(axis, target, series, legend)
    axes[-1].set_xlabel("experiment")
    title = f"autokernel {report.run_tag}"
    if not report.timing_meaningful:
        title += " (CPU interpreter: timings not meaningful)"
    figure.suptitle(title, fontsize=10)
    if legend:  # once for the figure, below the panels, never over the data
        figure.legend(list(legend.values()), list(legend), loc="lower center",
                      ncol=min(3, len(legend)), fontsize=7, frameon=False)
    height = 2.6 * panels + 1.2  # inches: half an inch for the legend, a third for the title
    figure.tight_layout(rect=(0, 0.5 / height if legend else 0, 1, 1 - 0.35 / height))
    return figure


def _draw_panel(axis: Any, target: Any, series: ProgressSeries, legend: dict[str, Any]) -> None:
    from matplotlib.ticker import MaxNLocator

    def remember(handle: Any, label: str) -> None:
        legend.setdefault(label, handle)

    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not series.points:  # a target the run has not reached (Ctrl-C): nothing to draw
        axis.set_title(f"{target.tag} ({target.shape} {target.dtype}): not started yet",
                       fontsize=9, loc="left")
        axis.set_yticks([])
        axis.set_xticks([])
        return
    placed = [p for p in series.points if p.level is not None]
    kept = [p for p in placed if p.status in COMMITTED]
    others = [p for p in placed if p.status not in COMMITTED]
    failed = [p for p in series.points if not p.passed]
    if series.best_steps:
        xs, ys = zip(*series.best_steps)
        (line,) = axis.step(xs, ys, where="post", color="tab:green", linewidth=1.4)
        remember(line, LINE_LABEL)
    for paired, face in ((True, "0.45"), (False, "none")):
        group = [p for p in others if p.paired is paired]
        if not group:
            continue
        with_interval = [p for p in group if p.low is not None and p.high is not None]
        if with_interval:
            bars = axis.errorbar(
                [p.experiment for p in with_interval], [p.level for p in with_interval],
                yerr=[[p.level - p.low for p in with_interval],  # type: ignore[operator]
                      [p.high - p.level for p in with_interval]],  # type: ignore[operator]
                fmt="none", ecolor="0.3", elinewidth=1.2, capsize=3, zorder=2)
            remember(bars, "95% interval of a paired speedup")
        dots = axis.scatter([p.experiment for p in group], [p.level for p in group], s=16,
                            facecolors=face, edgecolors="0.3", zorder=3)
        remember(dots, "not kept" if paired else "not kept, unpaired (objective_us ratio)")
    if kept:
        stars = axis.scatter([p.experiment for p in kept], [p.level for p in kept], s=52,
                             marker="*", color="tab:green", zorder=4)
        remember(stars, "kept (baseline, keeps)")
    values = [p.level for p in placed] + [p.low for p in others if p.low is not None]
    values += [p.high for p in others if p.high is not None]
    low = min(values) if values else 1.0
    high = max(values) if values else 1.0
    if low > 0 and high / low > LOG_SCALE_SPAN:
        axis.set_yscale("log")
    if failed:
        crosses = axis.scatter([p.experiment for p in failed], [low] * len(failed), marker="x",
                               s=18, color="tab:red", zorder=3)
        remember(crosses, "failed (drawn at the panel's floor)")
    _reference_lines(axis, series, low, high, remember)
    experiments = [p.experiment for p in series.points]
    axis.set_xlim(min(experiments) - 0.5, max(max(experiments), min(experiments) + 1) + 0.5)
    best = series.best_level
    axis.set_title(f"{target.tag} ({target.shape} {target.dtype}): best "
                   f"{'–' if best is None else format_speedup(best)} the baseline by the keep "
                   f"rule's figure; {format_speedup(target.speedup_vs_eager)} eager at the "
                   "primary shape", fontsize=9, loc="left")
    axis.set_ylabel(Y_LABEL, fontsize=8)
    axis.grid(alpha=0.3)


def _reference_lines(axis: Any, series: ProgressSeries, low: float, high: float,
                     remember: Any) -> None:
    """Eager and torch.compile as marked lines when they are near the data; named at the
    panel's top or bottom left corner when they are far off it, so they never squash it (the
    data starts at the baseline, low on the left, and rises to the right)."""
    references = [(series.eager_level, "tab:blue", "--", "eager PyTorch"),
                  (series.compile_level, "tab:purple", ":", "torch.compile")]
    floor, ceiling = low / REFERENCE_REACH, high * REFERENCE_REACH
    for level, color, style, label in references:
        if level is None:
            continue
        if floor <= level <= ceiling:
            line = axis.axhline(level, color=color, linestyle=style, linewidth=1.2)
            remember(line, f"{label} (baseline's timing)")
            continue
        above = level > ceiling
        ratio = level / high if above else low / level
        axis.annotate(f"{label}: {ratio:,.0f}× {'above' if above else 'below'} the data "
                      f"{'↑' if above else '↓'}", xy=(0.01, 0.97 if above else 0.03),
                      xycoords="axes fraction", ha="left", va="top" if above else "bottom",
                      fontsize=7, color=color)
