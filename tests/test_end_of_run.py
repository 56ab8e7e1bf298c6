"""The end of `autokernel run`/`resume`: one summary, with results.tsv's figures, and one resume
hint; a target the run never reached reads as not started, not as a failure.

Driven on the fake harness of test_workspace (seconds); tests/test_report.py checks the same on
the output of a real `autokernel run`.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from test_workspace import FakeBench, PlainDashboard, loop_config, new_run, runner_for

from autokernel.agents.tuner import TunerAgent
from autokernel.integrate.loader import open_run
from autokernel.integrate.report import TABLE_COLUMNS, _table_row, build_report
from autokernel.loop.keep_figure import KeepChain
from autokernel.loop.results import read_rows
from autokernel.loop.schedule import primary_reason
from autokernel.loop.state import RunState, TargetState
from autokernel.loop.summary import print_end_of_run
from autokernel.loop.workspace import RUN_FILE, Workspace
from autokernel.orchestrate import Decision
from autokernel.text import format_speedup


class StopAfterFirstTarget(PlainDashboard):
    """Ctrl-C as the first target finishes: the second target is never reached."""

    def __init__(self, stop: Any) -> None:
        super().__init__(stream=io.StringIO())
        self.stop = stop

    def target_finished(self, state: RunState, target: TargetState) -> None:
        super().target_finished(state, target)
        self.stop()


def interrupted_run(tmp_path: Path) -> tuple[Workspace, RunState, str]:
    ws, state, plan = new_run(tmp_path)
    runner = runner_for(ws, state, plan, TunerAgent(seed=0), FakeBench(),
                        loop_config(max_experiments=3))
    runner.dashboard = StopAfterFirstTarget(lambda: setattr(runner.signals, "requested", True))
    reason = runner.run()
    info = json.loads((ws.root / RUN_FILE).read_text())
    info.update(model_copy="model/model.py",
                config={"device": "cpu", "dtype": "fp32", "agent": "tuner"})
    (ws.root / RUN_FILE).write_text(json.dumps(info))
    return ws, state, reason


def end_of_run_output(ws: Workspace, state: RunState, reason: str, width: int) -> str:
    out = io.StringIO()
    print_end_of_run(ws, state, reason, Console(file=out, width=width, color_system=None))
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 100])
def test_the_end_of_an_interrupted_run_says_everything_once(tmp_path: Path, width: int) -> None:
    ws, state, reason = interrupted_run(tmp_path)
    assert not state.finished and reason == "interrupted"
    done, pending = state.targets
    assert done.status == "done" and pending.status == "pending"

    output = end_of_run_output(ws, state, reason, width)
    lines = output.splitlines()
    assert max(len(line.rstrip()) for line in lines if "/" not in line) <= width, output
    assert [line for line in lines if line.startswith("stopped:")] == ["stopped: interrupted"]
    assert output.count("autokernel resume") == 1, output
    assert output.rstrip().endswith(f"continue with: autokernel resume {ws.root}")
    assert output.count("primary profiled shape") == 1, output  # the figures are labelled once
    assert output.count(f"{done.tag}") == 1 and output.count(f"{pending.tag}") == 1, output
    pending_line = next(line for line in output.splitlines() if pending.tag in line)
    assert "not started" in pending_line
    assert "no passing kernel" not in pending_line and "–" in pending_line

    # The summary's figures: the keep rule's, chained (as progress.png), and results.tsv's
    # speedups of the best row at the primary shape.
    rows = read_rows(ws.results_path)
    best = next(r for r in rows if int(r["experiment"]) == done.best.experiment)
    chained = KeepChain.of_rows(rows).level(done.tag)
    done_line = next(line for line in output.splitlines() if done.tag in line)
    for figure in (format_speedup(chained), format_speedup(float(best["speedup_vs_pytorch"])),
                   format_speedup(float(best["speedup_vs_compile"]))):
        assert figure in done_line, (figure, done_line)
    assert "µs" not in done_line
    assert (ws.root / "report.md").is_file()


def test_a_finished_run_ends_without_a_resume_hint(tmp_path: Path) -> None:
    ws, state, reason = interrupted_run(tmp_path)
    state.finished = True
    output = end_of_run_output(ws, state, reason, 200)
    assert "autokernel resume" not in output
    assert sum(line.startswith("stopped:") for line in output.splitlines()) == 1


def test_a_target_that_stops_on_several_rules_names_the_first_and_lists_the_others() -> None:
    decision = Decision(True, "plateau", "plateau: 5 consecutive experiments not kept (limit 5); "
                        "time: 2.0 h on this target (limit 2.0 h)", ("plateau", "time"))
    reason = primary_reason(decision)
    assert reason == "plateau: 5 consecutive experiments not kept (limit 5) (also: time)"
    assert not re.search(r"; time:", reason)
    single = Decision(True, "time", "time: 2.0 h on this target (limit 2.0 h)", ("time",))
    assert primary_reason(single) == single.reason


def test_the_counts_add_up_and_read_in_the_right_number(tmp_path: Path) -> None:
    ws, state, reason = interrupted_run(tmp_path)
    output = end_of_run_output(ws, state, reason, 100)
    headline = re.search(r": (\d+) experiments? \((\d+) baselines?\) in ", output)
    assert headline, output
    total, baselines = int(headline[1]), int(headline[2])
    assert total == len(read_rows(ws.results_path))
    column = [c.header for c in TABLE_COLUMNS].index("experiments")
    per_target = [int(line.strip("|").split("|")[column])
                  for line in (ws.root / "report.md").read_text().splitlines()
                  if line.startswith("| 0")]
    assert len(per_target) == 2 and sum(per_target) + baselines == total, output
    assert not re.search(r"\b1 (experiments|baselines)\b", output), output


def test_a_target_not_started_yet_draws_no_warning(tmp_path: Path) -> None:
    ws, state, reason = interrupted_run(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's 'No artists with labels' went to stderr
        end_of_run_output(ws, state, reason, 100)
    assert (ws.root / "progress.png").stat().st_size > 0


def test_the_report_table_names_the_best_experiment_also_when_it_is_experiment_0(
        tmp_path: Path) -> None:
    ws, _, _ = interrupted_run(tmp_path)
    done = build_report(open_run(ws.root)).targets[0]
    best_cell = [c.header for c in TABLE_COLUMNS].index("best")
    for experiment in (0, 1):
        row = _table_row(dataclasses.replace(done, best_experiment=experiment))
        assert row[best_cell] == f"exp {experiment}", row


def test_the_summary_labels_its_figures_once_and_shows_no_latency_against_a_keep(
        tmp_path: Path) -> None:
    """A kept kernel read 0.83× its baseline by the primary shape's latencies on a noisy CPU run
    and 1.02× by the keep rule's figure: the table shows the keep rule's, as progress.png does,
    and says once what each figure is."""
    from autokernel.integrate.progress_plot import CAPTION

    ws, state, reason = interrupted_run(tmp_path)
    output = end_of_run_output(ws, state, reason, 100)
    flowing = " ".join(output.split())  # the console wraps the note at its width
    assert flowing.count("× baseline is the keep rule's figure") == 1, output
    assert flowing.count("primary profiled shape") == 1, output

    markdown = (ws.root / "report.md").read_text()
    assert markdown.count("primary profiled shape") == 1, markdown
    assert "| × baseline (keep rule) |" in markdown and "| baseline |" not in markdown
    targets = markdown[markdown.index("## Targets"):markdown.index("## End to end")]
    assert "keep rule" in targets and "call-weighted" in targets
    assert "same figure" in CAPTION and CAPTION in markdown


def test_a_run_stopped_by_its_hours_with_targets_not_started_is_not_called_finished(
        tmp_path: Path) -> None:
    ws, state, _ = interrupted_run(tmp_path)
    state.finished = True  # as the loop ends when --hours is spent: the second target waits
    state.stop_reason = "the run's time budget (0.01 h) is spent"
    state.hours = 0.01
    state.save(ws.state_path)
    output = end_of_run_output(ws, state, state.stop_reason, 100)
    headline = " ".join(output.split())
    assert "; finished" not in headline and "with 1 target not started (02_rmsnorm)" in headline
    hint = output.rstrip().splitlines()[-1]
    assert hint.startswith(f"continue with: autokernel resume {ws.root} --hours "), output
