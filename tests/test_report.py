"""`autokernel report` on a real finished run: report.md and progress.png, numbers that match
results.tsv, verify's end-to-end figures, the summary at the end of `autokernel run`, bad input."""

from __future__ import annotations

import json
from pathlib import Path

from finished_run import (  # noqa: F401 - fixtures
    MadeRun,
    autokernel,
    made_run,
    one_line_error,
    run_dir,
)

from autokernel.integrate.loader import open_run
from autokernel.integrate.progress_plot import progress_series
from autokernel.integrate.report import _pct, build_report
from autokernel.loop.keep_figure import KeepChain
from autokernel.loop.results import header_line, read_rows
from autokernel.text import format_speedup, markdown_cell

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def number(text: str) -> float | None:
    return float(text) if text else None


def markdown_row(markdown: str, tag: str) -> list[str]:
    line = next(line for line in markdown.splitlines() if line.startswith(f"| {tag} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_report_writes_markdown_and_plot_with_the_numbers_of_results_tsv(run_dir: Path) -> None:
    done = autokernel("report", str(run_dir))
    assert done.returncode == 0, done.stderr[-2000:]
    markdown = (run_dir / "report.md").read_text()
    assert (run_dir / "progress.png").read_bytes().startswith(PNG_SIGNATURE)
    assert "![progress](progress.png)" in markdown
    assert "Not verified yet" in markdown

    rows = read_rows(run_dir / "results.tsv")  # the loop's own reader, not the report's pandas
    state = json.loads((run_dir / "state.json").read_text())
    report = build_report(open_run(run_dir))
    assert report.experiments == len(rows)
    for target, saved in zip(report.targets, state["targets"]):
        mine = [r for r in rows if r["tag"] == target.tag]
        baseline = [r for r in mine if r["status"] == "baseline"]
        assert len(baseline) == 1  # experiment 0 of the target, counted once
        committed = [r for r in mine if r["status"] in ("baseline", "keep")]
        best = committed[-1]  # each keep beats the one before: the last is the best
        assert int(best["experiment"]) == target.best_experiment == saved["best"]["experiment"]
        assert target.experiments == len(mine) - 1 == saved["experiments"]
        assert target.keeps == sum(r["status"] == "keep" for r in mine) == saved["keeps"]
        assert target.baseline_us == number(baseline[0]["latency_us"])
        assert target.best_us == number(best["latency_us"])
        assert target.speedup_vs_eager == number(best["speedup_vs_pytorch"])
        assert target.speedup_vs_compile == number(best["speedup_vs_compile"])
        assert target.stop_reason == saved["stop_reason"] and target.stop_reason
        cells = markdown_row(markdown, target.tag)
        assert cells[2] == f"exp {best['experiment']}"
        # The keep rule's figure, chained over the keeps: the same as progress.png's best line.
        assert cells[3] == format_speedup(KeepChain.of_rows(mine).level(target.tag))
        assert target.vs_baseline == progress_series(report.frame[report.frame["tag"]
                                                                  == target.tag]).best_level
        assert cells[4] == format_speedup(number(best["speedup_vs_pytorch"]))
        assert cells[5] == format_speedup(number(best["speedup_vs_compile"]))
        assert cells[6] == (_pct(number(best["pct_peak"])) if best["pct_peak"] else "–")
        assert cells[7:9] == [str(len(mine) - 1), str(target.keeps)]
    assert "Triton interpreter" in done.stdout  # cpu timings are labelled as such


def test_report_shows_the_end_to_end_figures_of_verify(run_dir: Path) -> None:
    verified = autokernel("verify", str(run_dir), "--device", "cpu", "--iters", "1",
                          "--no-gradients")
    assert verified.returncode == 0, verified.stderr[-2000:]
    result = json.loads((run_dir / "verify.json").read_text())
    done = autokernel("report", str(run_dir))
    assert done.returncode == 0, done.stderr[-2000:]
    markdown = (run_dir / "report.md").read_text()
    measured = f"{result['speedup']['device']['vs_eager']:.3f}× vs eager"
    wall = f"{result['speedup']['wall']['vs_eager']:.3f}× vs eager"
    estimate = f"{result['amdahl']['estimate_vs_eager']:.3f}× vs eager"
    for text in (measured, wall, estimate, "## End to end", "device time", "wall time"):
        assert text in markdown
    assert measured in done.stdout and "Amdahl estimate" in done.stdout
    assert "Stale" not in markdown
    from autokernel.integrate.verify import routed_where

    for row in result["kernels"]:  # modules, functions and the scopes where calls are intercepted
        assert (f"| {row['tag']} | {markdown_cell(routed_where(row))} | "
                f"{row['calls_per_forward']} |") in markdown


    # A later session changes a target's best kernel: the figures no longer describe the run.
    state = json.loads((run_dir / "state.json").read_text())
    state["targets"][0]["best"]["experiment"] += 1000
    (run_dir / "state.json").write_text(json.dumps(state))
    assert "stale" in autokernel("report", str(run_dir)).stdout
    assert "**Stale:**" in (run_dir / "report.md").read_text()


def test_run_prints_the_report_summary_when_it_ends(made_run: MadeRun) -> None:
    output = made_run.run_output
    stops = [line for line in output.splitlines() if line.startswith("stopped:")]
    assert stops == ["stopped: every target is done"], output[-3000:]  # said once
    tail = output[output.rindex("stopped:"):]
    assert "report:" in tail and "progress.png" in tail
    assert "not verified yet" in tail
    assert tail.count("primary profiled shape") == 1  # one summary, its figures labelled once
    assert "autokernel resume" not in output  # a finished run has nothing to resume
    assert output.count("say nothing about a GPU") == 1, output  # the CPU caveat, said once
    rows = read_rows(made_run.path / "results.tsv")
    for saved in json.loads((made_run.path / "state.json").read_text())["targets"]:
        line = next(line for line in tail.splitlines() if saved["tag"] in line)
        best = next(r for r in rows if int(r["experiment"]) == saved["best"]["experiment"])
        assert format_speedup(KeepChain.of_rows(rows).level(saved["tag"])) in line
        assert format_speedup(number(best["speedup_vs_pytorch"])) in line
        if best["speedup_vs_compile"]:  # on the CPU not timed: the empty column is dropped
            assert format_speedup(number(best["speedup_vs_compile"])) in line
    assert (made_run.path / "report.md").is_file() and (made_run.path / "progress.png").is_file()


def test_report_says_the_cpu_caveat_once(run_dir: Path) -> None:
    from autokernel.integrate.end_to_end import end_to_end_lines

    assert autokernel("report", str(run_dir)).stdout.count("say nothing about a GPU") == 1
    cpu_verify = {"timing": {"meaningful": False}}
    assert any("say nothing about a GPU" in line for line in end_to_end_lines(cpu_verify))
    assert not any("say nothing about a GPU" in line
                   for line in end_to_end_lines(cpu_verify, cpu_note=False))


def test_report_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    assert "is not an autokernel run" in one_line_error(autokernel("report", str(tmp_path)))


def test_report_refuses_a_run_without_experiments(run_dir: Path) -> None:
    (run_dir / "results.tsv").write_text(header_line())
    assert "no experiment" in one_line_error(autokernel("report", str(run_dir)))
