"""Issue 29: kernelbench says where each problem is (its phase from its log, the log's path) and
its tables count every problem given, interrupted or never run. Fast: no child process."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from test_workspace import FakeBench, loop_config, make_plan, new_run, runner_for

from autokernel.agents.tuner import TunerAgent
from autokernel.cli.kernelbench import _problem_line
from autokernel.kernelbench.problem import DONE, INTERRUPTED
from autokernel.kernelbench.progress import OPTIMIZING, PROFILING, VERIFYING, problem_phase
from autokernel.kernelbench.table import NOT_RUN, write_tables
from autokernel.loop.dashboard import PlainDashboard
from autokernel.profiling.plan import Plan


def test_the_phase_is_read_from_the_log_the_child_writes(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    runner = runner_for(ws, state, plan, TunerAgent(seed=0), FakeBench(),
                        loop_config(max_experiments=2))
    log = io.StringIO()
    runner.dashboard = PlainDashboard(stream=log)
    assert problem_phase("").name == PROFILING
    assert problem_phase("warming up the model\n").name == PROFILING
    started = log.getvalue()
    runner.run()
    written = log.getvalue()
    first_lines = "\n".join(written.splitlines()[:3])
    assert started == "" and problem_phase(first_lines).name == OPTIMIZING
    phase = problem_phase(written)
    assert phase.name == OPTIMIZING and phase.detail.startswith("last exp 2 01_softmax "), phase
    verifying = written + "stopped: every target is done\nmodel m.py (Model), fp32 on cpu; " \
        "1 finished kernel\ntiming eager, patched: wall time per synchronized forward\n"
    assert problem_phase(verifying).name == VERIFYING
    assert problem_phase(verifying).text() == f"{VERIFYING}: timing eager, patched"


def test_the_tables_count_every_problem_given_and_an_interruption_reads_plainly(
        tmp_path: Path) -> None:
    meta = {"device": "cpu", "gpu": None, "dtype": "fp32", "minutes_per_problem": 1.0,
            "agent": "tuner", "commit": "abc", "versions": {}, "created": "now"}
    interrupted = {"problem": "03_softmax_wide", "status": INTERRUPTED, "correct": False,
                   "correctness": "–", "speedup_vs_eager": None, "speedup_vs_compile": None,
                   "speedup_figure": "device time per forward", "wall_speedup_vs_eager": None,
                   "wall_speedup_vs_compile": None, "targets": [], "stage": None,
                   "reason": "interrupted (Ctrl-C); continue its run with `autokernel resume "
                             "x`", "seconds": 612.0}
    paths = write_tables(tmp_path, [interrupted], meta, ["03_softmax_wide", "04_sum_over_dim1"])
    markdown = paths["md"].read_text()
    assert markdown.startswith("# autokernel kernelbench: 2 problems (1 not run yet)")
    assert "| 04_sum_over_dim1 | not run |" in markdown and "| 03_softmax_wide |" in markdown
    assert "fast_0" in markdown
    assert paths["tsv"].read_text().count(NOT_RUN) == 1
    line = _problem_line(0, 2, interrupted)
    assert line == "[1/2] 03_softmax_wide: interrupted (Ctrl-C) after 10.2 min", line
    done = dict(interrupted, status=DONE, correctness="PASS", correct=True, reason="",
                speedup_vs_eager=1.2, wall_speedup_vs_eager=0.5)
    assert _problem_line(1, 2, done) == ("[2/2] 03_softmax_wide: done; PASS, device time 1.200× "
                                         "eager and – compile, wall 0.500× eager (10.2 min)")


def test_on_the_cpu_each_problem_says_what_its_budget_gets_through(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from autokernel.cli.kernelbench import ProblemProgress
    from autokernel.kernelbench.progress import Phase

    big = Plan.load(Path(__file__).resolve().parents[1] / "docs" / "profiles"
                    / "llama_7b_layers.json")
    (tmp_path / "llama").mkdir()
    big.save(tmp_path / "llama" / "plan.json")
    (tmp_path / "llama" / "run.json").write_text(json.dumps(
        {"targets": [0, 1], "config": {"bench_timeout_s": 300.0}}))
    progress = ProblemProgress(1, ["llama"], tmp_path / "logs", 15.0, "cpu")
    progress.update(0, Phase(OPTIMIZING))
    said = " ".join(capsys.readouterr().out.split())
    assert "[1/1] llama: optimizing (up to 15 min)" in said
    assert "[1/1] llama: warning: on the CPU one experiment on " in said and "time out" in said
