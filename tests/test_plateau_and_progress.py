"""Issue 16: the plateau rule made visible (results.tsv's `phase`, the log line, the dashboard),
older results.tsv files still read, and progress.png's best line in the keep rule's figure."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from autokernel.agents.tuner import TunerAgent
from autokernel.integrate.progress_plot import progress_series
from autokernel.integrate.report import read_results
from autokernel.loop.dashboard import PlainDashboard
from autokernel.loop.results import (
    COLUMNS,
    PHASES,
    RIGHTNOW_COLUMNS,
    ResultRow,
    ResultsLog,
    experiment_phase,
    read_rows,
)
from test_workspace import (
    PairedFakeBench,
    assert_consistent,
    loop_config,
    make_plan,
    new_run,
    runner_for,
)

AUTOKERNEL_COLUMNS = ["experiment", "tag", "kernel_type", "throughput_tflops", "latency_us",
                      "pct_peak", "speedup_vs_pytorch", "correctness", "peak_vram_mb",
                      "description"]


def not_kept_in_a_row(rows: list[dict[str, str]]) -> int:
    """The plateau count as the README states the rule: `search` rows not kept since the last
    keep; `explore` rows and the baseline are not counted."""
    count = 0
    for row in rows:
        if row["status"] == "keep":
            count = 0
        elif row["phase"] == "search":
            count += 1
    return count


def test_phase_is_an_extra_column_after_the_ten_autokernel_ones() -> None:
    assert list(RIGHTNOW_COLUMNS) == AUTOKERNEL_COLUMNS
    assert list(COLUMNS[:10]) == AUTOKERNEL_COLUMNS and "phase" in COLUMNS[10:]
    assert set(PHASES) == {"baseline", "explore", "search", "no_kernel"}
    assert experiment_phase("fail", sweep=False, judged=False) == "no_kernel"
    assert experiment_phase("baseline", sweep=False) == "baseline"
    assert experiment_phase("revert", sweep=True) == "explore"
    assert experiment_phase("crash", sweep=False) == "search"
    from autokernel.loop.dashboard import phase_text

    def row(status: str, phase: str) -> ResultRow:
        return ResultRow(experiment=1, tag="t", kernel_type="softmax", status=status,
                         correctness="PASS", description="", target_rank=1, shape="1",
                         dtype="fp32", agent="tuner", phase=phase)

    assert phase_text(row("revert", "explore"), 2) == "explore, not counted"
    assert phase_text(row("keep", "explore"), 0) == "explore"  # a keep resets, whatever its phase
    assert phase_text(row("crash", "search"), 3) == "search, 3 not kept in a row"
    assert phase_text(row("fail", "no_kernel"), 3) == "no kernel, not counted"
    assert phase_text(row("baseline", "baseline"), 0) == phase_text(row("revert", ""), 1) == ""
    with pytest.raises(ValueError, match="unknown phase"):
        ResultRow(experiment=1, tag="t", kernel_type="softmax", status="revert",
                  correctness="PASS", description="", target_rank=1, shape="1", dtype="fp32",
                  agent="tuner", phase="warmup")


def test_tuner_samples_are_marked_explore_and_only_search_rows_count_toward_the_plateau(
        tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    runner = runner_for(ws, state, plan, TunerAgent(seed=0), PairedFakeBench(),
                        loop_config(max_consecutive_reverts=3, max_experiments=40))
    log = io.StringIO()
    runner.dashboard = PlainDashboard(stream=log)
    runner.run()
    rows = assert_consistent(ws, state)
    phases = [row["phase"] for row in rows]
    assert phases[0] == "baseline"
    # The tuner's initial design comes first, then its model-guided proposals.
    first_search = phases.index("search")
    assert set(phases[1:first_search]) == {"explore"} and first_search > 3
    assert set(phases[first_search:]) == {"search"}
    target = state.targets[0]
    assert target.consecutive_reverts == not_kept_in_a_row(rows)
    if target.stop_rule == "plateau":
        assert not_kept_in_a_row(rows) == 3
    # More than three non-kept experiments in a row can pass without a stop: explore rows.
    lines = log.getvalue().splitlines()
    assert any("[explore, not counted]" in line for line in lines)
    explore_revert = next(r for r in rows if r["phase"] == "explore" and r["status"] != "keep")
    line = next(x for x in lines if f"exp {explore_revert['experiment']} " in x)
    assert "[explore, not counted]" in line
    counted = [r for r in rows if r["phase"] == "search" and r["status"] != "keep"]
    if counted:
        line = next(x for x in lines if f"exp {counted[-1]['experiment']} " in x)
        assert "not kept in a row]" in line


def test_the_live_dashboard_shows_the_phase(tmp_path: Path) -> None:
    from rich.console import Console

    from autokernel.loop.dashboard import LiveDashboard

    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    console = Console(file=io.StringIO(), width=120, record=True, force_terminal=True)
    runner = runner_for(ws, state, plan, TunerAgent(seed=0), PairedFakeBench(),
                        loop_config(max_experiments=4))
    runner.dashboard = LiveDashboard(console, title="t", device="cpu", agent="tuner")
    runner.run()
    text = console.export_text()
    assert "phase" in text and "explore" in text


def drop_phase(path: Path) -> None:
    """results.tsv as a version before the phase column wrote it."""
    lines = path.read_text().splitlines()
    at = lines[0].split("\t").index("phase")
    path.write_text("".join("\t".join(c for i, c in enumerate(line.split("\t")) if i != at)
                            + "\n" for line in lines))


def test_an_older_results_tsv_without_phase_still_reports_and_resumes(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    runner_for(ws, state, plan, TunerAgent(seed=0), PairedFakeBench(),
               loop_config(max_experiments=6)).run()
    before = read_rows(ws.results_path)
    drop_phase(ws.results_path)
    assert "phase" not in ws.results_path.read_text().split("\n", 1)[0]
    # The report reads it as it is.
    frame = read_results(ws.results_path)
    assert "phase" not in frame and len(frame) == len(before)
    series = progress_series(frame)
    assert series.best_steps and all(p.phase == "" for p in series.points)
    # Resume opens it with today's columns: the old rows keep their cells, phase left empty.
    log = ResultsLog.open(ws.results_path)
    after = read_rows(ws.results_path)
    assert list(after[0]) == list(COLUMNS)
    assert [{k: v for k, v in r.items() if k != "phase"} for r in after] == \
        [{k: v for k, v in r.items() if k != "phase"} for r in before]
    assert {r["phase"] for r in after} == {""}
    assert log.last_experiment == len(before) - 1


def frame_of(rows: list[dict[str, object]]) -> pd.DataFrame:
    return pd.DataFrame([{"tag": "01_softmax", "correctness": "PASS", **row} for row in rows])


def test_the_best_line_follows_the_keep_rule_not_the_primary_shape_speedup() -> None:
    frame = frame_of([
        dict(experiment=0, status="baseline", speedup_vs_pytorch=2.0, objective_us=10.0),
        # Faster at the primary shape than anything kept, but the paired, call-weighted figure
        # saw no gain beyond the noise: reverted.
        dict(experiment=1, status="revert", speedup_vs_pytorch=3.0, objective_us=9.5,
             vs_best=1.004, vs_best_lo=0.97, vs_best_hi=1.04),
        dict(experiment=2, status="keep", speedup_vs_pytorch=2.4, objective_us=8.0,
             vs_best=1.2, vs_best_lo=1.15, vs_best_hi=1.25),
        dict(experiment=3, status="revert", speedup_vs_pytorch=2.6, objective_us=8.1,
             vs_best=0.9, vs_best_lo=0.85, vs_best_hi=0.95),
        dict(experiment=4, status="crash", correctness="CRASH"),
        dict(experiment=5, status="keep", speedup_vs_pytorch=2.5, objective_us=7.5,
             vs_best=1.1, vs_best_lo=1.05, vs_best_hi=1.12),
        dict(experiment=6, status="revert", speedup_vs_pytorch=2.7, objective_us=7.6),
    ])
    series = progress_series(frame)
    levels = [level for _, level in series.best_steps]
    assert levels == sorted(levels)
    assert series.best_steps == [(0, 1.0), (2, pytest.approx(1.2)), (5, pytest.approx(1.32)),
                                 (6, pytest.approx(1.32))]
    by_experiment = {p.experiment: p for p in series.points}
    for experiment, level in series.best_steps[:-1]:  # every kept point sits on the line
        assert by_experiment[experiment].level == level
    # A non-kept point is above the line only when its interval reaches below the margin.
    line_at = {1: 1.0, 3: 1.2, 6: 1.32}
    for experiment, line in line_at.items():
        point = by_experiment[experiment]
        assert point.level is not None
        if point.level > line:
            assert point.low is not None and point.low <= line * 1.01
    assert not by_experiment[6].paired  # no paired figure: the objective_us ratio
    assert by_experiment[6].level == pytest.approx(1.32 * 7.5 / 7.6)
    assert by_experiment[4].level is None and not by_experiment[4].passed
    assert series.eager_level == pytest.approx(0.5)  # eager, on the baseline's scale


def test_the_best_line_of_a_real_loop_run_is_monotone_over_its_keeps(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    runner_for(ws, state, plan, TunerAgent(seed=0), PairedFakeBench(),
               loop_config(max_experiments=20, max_consecutive_reverts=None)).run()
    frame = read_results(ws.results_path)
    series = progress_series(frame)
    kept = frame[frame["status"].isin(("baseline", "keep"))]["experiment"].tolist()
    assert [e for e, _ in series.best_steps[:-1]] == kept and len(kept) > 1
    levels = [level for _, level in series.best_steps]
    assert all(a < b for a, b in zip(levels[:-2], levels[1:-1]))  # each keep raises it
    assert levels[-1] == levels[-2]


def test_the_plot_is_drawn_from_that_data_and_labelled(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from autokernel.integrate.progress_plot import CAPTION, Y_LABEL, plot_progress

    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    runner_for(ws, state, plan, TunerAgent(seed=0), PairedFakeBench(),
               loop_config(max_experiments=6)).run()
    report = SimpleNamespace(
        frame=read_results(ws.results_path), run_tag="m-1", timing_meaningful=False,
        targets=[SimpleNamespace(tag="01_softmax", shape="64x128", dtype="fp32",
                                 speedup_vs_eager=2.0)])
    path = plot_progress(report, tmp_path / "progress.png")  # type: ignore[arg-type]
    assert path.read_bytes().startswith(b"\x89PNG")
    assert "keep rule" in Y_LABEL and "paired" in CAPTION and "--min-gain" in CAPTION


def test_the_numeric_columns_come_from_the_row_schema() -> None:
    from autokernel.loop.results import COLUMNS, NUMERIC_COLUMNS

    assert set(NUMERIC_COLUMNS) <= set(COLUMNS)
    assert {"experiment", "latency_us", "speedup_vs_pytorch", "vs_best_lo", "cost_usd"} \
        <= set(NUMERIC_COLUMNS)
    assert not {"tag", "correctness", "description", "shape", "phase"} & set(NUMERIC_COLUMNS)
