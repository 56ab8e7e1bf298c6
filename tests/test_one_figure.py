"""Issue 29: one figure per decision. The log line, the commit message, the live dashboard,
report.md and progress.png show the figure the keep rule decided on (results.tsv's paired
`vs_best` with its interval, chained over the keeps), never a latency that contradicts it.

The loop runs on the fake harness of test_workspace, with a bench whose primary-shape latencies
are as noisy as the CPU interpreter's between runs (a kept kernel can read 3× slower there) while
its paired rounds say what the keep rule sees.
"""

from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path
from typing import Any

from rich.console import Console
from test_workspace import PairedFakeBench, git, loop_config, make_plan, new_run, runner_for

from autokernel.agents.tuner import TunerAgent
from autokernel.harness.result import BenchResult
from autokernel.integrate.loader import open_run
from autokernel.integrate.progress_plot import progress_series
from autokernel.integrate.report import TABLE_COLUMNS, build_report, markdown
from autokernel.loop.dashboard import LiveDashboard, PlainDashboard
from autokernel.loop.keep_figure import paired_cell, paired_text
from autokernel.loop.results import read_rows
from autokernel.loop.workspace import RUN_FILE
from autokernel.text import format_speedup

LATENCY = re.compile(r"\d(?: µs| ms)")


class NoisyBetweenRuns(PairedFakeBench):
    """Primary-shape latencies off by up to 3× either way from run to run; the paired rounds
    spread ±4% around the true ratio, so every verdict has an interval."""

    def __init__(self) -> None:
        super().__init__()
        self.noise = random.Random(7)

    def judge(self, source: str, device: str, shapes: list[list[int]], dtypes: list[str], *,
              quick: bool, incumbent: Path | None) -> BenchResult:
        result = super().judge(source, device, shapes, dtypes, quick=quick, incumbent=incumbent)
        for timing in result.timings:
            timing.latency_us *= self.noise.choice((0.33, 0.5, 1.0, 2.0, 3.0))
            if timing.paired_ratios:
                r = timing.paired_ratios[0]
                timing.paired_ratios = [r * f for f in (0.96, 0.98, 1.0, 1.02, 1.04)]
        return result


class BothDashboards:
    """The log lines, and the live view's state for rendering afterwards."""

    def __init__(self) -> None:
        self.log = io.StringIO()
        self.plain = PlainDashboard(stream=self.log)
        self.live = LiveDashboard(Console(file=io.StringIO()), title="autokernel m-1",
                                  device="cpu", agent="tuner", last_rows=40)

    def start(self, state: Any) -> None:
        self.plain.start(state)
        self.live.state = state

    def stop(self) -> None:
        return None

    def __getattr__(self, hook: str) -> Any:
        def both(*args: Any) -> None:
            getattr(self.plain, hook)(*args)
            getattr(self.live, hook)(*args)
        return both


def the_figure(row: dict[str, str]) -> str:
    """What the keep rule saw, written from results.tsv's own columns."""
    return paired_text(float(row["vs_best"]), float(row["vs_best_lo"]), float(row["vs_best_hi"]))


def test_every_decision_is_shown_with_the_keep_rules_figure(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    runner = runner_for(ws, state, plan, TunerAgent(seed=0), NoisyBetweenRuns(),
                        loop_config(max_experiments=14, max_consecutive_reverts=None))
    dashboards = BothDashboards()
    runner.dashboard = dashboards  # type: ignore[assignment]
    runner.run()
    rows = read_rows(ws.results_path)
    judged = [r for r in rows if r["vs_best"]]
    kept = [r for r in judged if r["status"] == "keep"]
    assert kept and len(judged) > len(kept), rows
    # The scenario of the issue: a keep whose primary-shape latency reads slower than the best's.
    assert any(float(r["latency_us"]) > float(rows[0]["latency_us"]) for r in kept), kept

    lines = dashboards.log.getvalue().splitlines()
    for row in judged:
        line = next(x for x in lines if f"exp {row['experiment']} " in x)
        verdict = row["status"].upper()
        assert f" {verdict}" in line and the_figure(row) in line, (line, row)
        assert not LATENCY.search(line), line  # no latency beside a verdict
        if row["status"] == "keep":
            assert float(row["vs_best"]) > 1  # a kept kernel is never shown as slower
            message = git(ws, "log", "-1", "--format=%s", row["commit"])
            assert f"keep: {the_figure(row)}" in message and not LATENCY.search(message)

    # The live dashboard: the same figure in its last-experiments table, at 80 and 100 columns.
    for width in (80, 100):
        console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
        console.print(dashboards.live.render())
        text = console.export_text()
        assert max(len(line.rstrip()) for line in text.splitlines()) <= width, text
        for row in judged:
            assert paired_cell(row) in text, (paired_cell(row), text)
            assert f"{float(row['vs_best']):.3f}× ({float(row['vs_best_lo']):.3f}–" \
                f"{float(row['vs_best_hi']):.3f})" == paired_cell(row)

    # report.md and progress.png: the keeps' paired figures chained, nothing else.
    chained = 1.0
    for row in kept:
        chained *= float(row["vs_best"])
    info = json.loads((ws.root / RUN_FILE).read_text())
    info.update(model_copy="model/model.py",
                config={"device": "cpu", "dtype": "fp32", "agent": "tuner"})
    (ws.root / RUN_FILE).write_text(json.dumps(info))
    report = build_report(open_run(ws.root))
    series = progress_series(report.frame)
    assert series.best_level is not None and abs(series.best_level - chained) < 1e-9 * chained
    row_cells = next(line for line in markdown(report).splitlines()
                     if line.startswith("| 01_softmax |")).strip("|").split("|")
    column = [c.header for c in TABLE_COLUMNS].index("× baseline (keep rule)")
    assert row_cells[column].strip() == format_speedup(chained)
    finish = git(ws, "log", "-1", "--format=%s")
    assert finish.startswith("finish 01_softmax") and f"{format_speedup(chained)} the baseline" \
        in finish and not LATENCY.search(finish), finish


def test_the_plot_reads_well_on_an_interpreter_run_with_a_one_experiment_panel() -> None:
    """Integer ticks, a y-axis on the data (eager PyTorch 1000× off it is named at the edge, not
    drawn), visible intervals and one legend for the figure."""
    from types import SimpleNamespace

    import pandas as pd

    from autokernel.integrate.progress_plot import REFERENCE_REACH, progress_figure

    def row(tag: str, experiment: int, status: str, **figures: float) -> dict[str, Any]:
        return {"tag": tag, "experiment": experiment, "status": status, "correctness": "PASS",
                **figures}

    frame = pd.DataFrame([
        row("01_softmax", 0, "baseline", speedup_vs_pytorch=0.001, objective_us=9000.0),
        row("01_softmax", 1, "revert", vs_best=0.9, vs_best_lo=0.7, vs_best_hi=1.1),
        row("01_softmax", 2, "keep", vs_best=1.3, vs_best_lo=1.2, vs_best_hi=1.4),
        row("02_rmsnorm", 3, "baseline", speedup_vs_pytorch=0.002, objective_us=800.0),
    ])
    target = SimpleNamespace(shape="64x128", dtype="fp32", speedup_vs_eager=0.001)
    report = SimpleNamespace(frame=frame, run_tag="m-1", timing_meaningful=False, targets=[
        SimpleNamespace(tag="01_softmax", **vars(target)),
        SimpleNamespace(tag="02_rmsnorm", **vars(target))])
    figure = progress_figure(report)  # type: ignore[arg-type]
    figure.canvas.draw()
    first, single = figure.axes
    for axis in (first, single):
        ticks = [t for t in axis.get_xticks() if axis.get_xlim()[0] <= t <= axis.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
        assert axis.get_legend() is None
        low, high = axis.get_ylim()
        assert high < 1.4 * REFERENCE_REACH and axis.get_yscale() == "linear"
        assert any("eager PyTorch: " in text.get_text() and "above the data" in text.get_text()
                   for text in axis.texts)
    assert len(figure.legends) == 1
    labels = [t.get_text() for t in figure.legends[0].get_texts()]
    assert len(labels) == len(set(labels)) and "95% interval of a paired speedup" in labels
    (interval,) = first.containers  # the revert's interval: an error bar with caps
    _, caps, _ = interval.lines
    assert len(caps) == 2
