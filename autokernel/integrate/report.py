"""`autokernel report DIR`: what the night produced, from results.tsv (pandas) and the run state.

Per target: the baseline (its experiment 0, the starter), the best kernel, the speedup of the
best over eager PyTorch and over torch.compile, % of peak, experiments, keeps, failures, the
stop reason and the time spent; end to end, the figures `autokernel verify` saved. Written to
`report.md` and `progress.png` in the workspace; `print_summary` shows the same on the terminal,
and `autokernel run` prints it when the loop ends.

Every per-experiment figure is read from results.tsv as written. A target's progress is the keep
rule's own figure, chained over its keeps (`autokernel.loop.keep_figure`), the same figure as
progress.png, the log lines and the commit messages; its speedups over eager and compiled stock
PyTorch are the best row's, at the primary shape. The state supplies what results.tsv does not
hold: which experiment is each target's best, the stop reason and each target's own clock.
Experiments are counted once: one row per experiment.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autokernel.device import CPU_TIMING_NOTE
from autokernel.loop.dashboard import status_text
from autokernel.loop.results import FAILED_STATUSES
from autokernel.tables import ABBREVIATIONS, Column, fit_table
from autokernel.text import (count_of, format_duration, format_latency, format_speedup,
                             markdown_cell)

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

    from autokernel.integrate.loader import FinishedRun

REPORT_FILE = "report.md"
PLOT_FILE = "progress.png"


def read_results(path: Path) -> pd.DataFrame:
    """results.tsv as a DataFrame: numbers as floats (blank = NaN), text as str."""
    import pandas as pd

    from autokernel.loop.results import NUMERIC_COLUMNS

    frame = pd.read_csv(path, sep="\t", quoting=csv.QUOTE_NONE, dtype=str,
                        keep_default_na=False)
    for column in NUMERIC_COLUMNS:
        if column in frame:
            frame[column] = pd.to_numeric(frame[column].replace("", None), errors="coerce")
    if "experiment" in frame:
        frame["experiment"] = frame["experiment"].astype(int)
    return frame


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number  # NaN -> None


@dataclass
class TargetReport:
    tag: str
    kernel_type: str
    status: str
    share: float
    shape: str
    dtype: str
    experiments: int  # after the baseline
    keeps: int
    failed: int
    baseline_experiment: int | None
    baseline_us: float | None
    best_experiment: int | None
    best_us: float | None
    best_description: str
    best_commit: str
    # The best kernel × the baseline in the keep rule's figure (its paired speedups chained
    # over the keeps), as progress.png plots it.
    vs_baseline: float | None
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    pct_peak: float | None
    pct_peak_measured: float | None
    stop_rule: str | None
    stop_reason: str
    seconds: float
    kernel_file: str | None
    kept: list[tuple[int, str]] = field(default_factory=list)  # (experiment, description)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass
class RunReport:
    run_tag: str
    root: Path
    model: str
    class_name: str
    device: str
    dtype: str
    gpu: str | None
    agent: str
    timing_meaningful: bool
    experiments: int  # rows in results.tsv
    run_seconds: float
    finished: bool
    stop_reason: str
    cost_usd: float
    targets: list[TargetReport]
    verify: dict[str, Any] | None
    frame: Any = None  # the results DataFrame the figures come from

    @property
    def baselines(self) -> int:
        """Rows that are a target's experiment 0 (the starter), counted in `experiments`."""
        return sum(t.baseline_experiment is not None for t in self.targets)

    @property
    def not_started(self) -> list[TargetReport]:
        return [t for t in self.targets if _not_started(t)]

    @property
    def complete(self) -> bool:
        """Finished with every target done or skipped: none left waiting for time."""
        return self.finished and not self.not_started

    @property
    def experiments_per_hour(self) -> float | None:
        return self.experiments / self.run_seconds * 3600 if self.run_seconds > 0 else None

    @property
    def stale_verify(self) -> str:
        """Why verify.json no longer describes this run's kernels ("" when it does)."""
        if not self.verify:
            return ""
        verified = {r["tag"]: r.get("best_experiment") for r in self.verify.get("kernels", [])}
        # Verify leaves out kernels slower than PyTorch, so only the kernels it spliced in are
        # compared: stale means one of them has since changed or disappeared.
        current = {t.tag: t.best_experiment for t in self.targets
                   if t.kernel_file and t.tag in verified}
        if verified != current:
            return (f"verify.json was made for other kernels than the run's current ones "
                    f"(verified {verified}, now {current}); run `autokernel verify "
                    f"{self.root}` again")
        return ""


def build_report(run: FinishedRun) -> RunReport:
    """The figures of a run, finished or still going (targets not done show their progress)."""
    from autokernel.integrate.loader import RunError
    from autokernel.integrate.progress_plot import progress_series
    from autokernel.integrate.verify_result import read_result

    if not run.results_path.is_file():
        raise RunError(f"{run.root} has no results.tsv")
    frame = read_results(run.results_path)
    if frame.empty:
        raise RunError(f"{run.root} has no experiment in results.tsv yet")
    targets = []
    for target in run.state.targets:
        rows = frame[frame["tag"] == target.tag]
        plan_target = run.plan_target(target)
        baseline = rows[rows["status"] == "baseline"]
        base = baseline.iloc[0] if not baseline.empty else None
        best_experiment = target.best.experiment if target.best is not None else None
        best_rows = rows[rows["experiment"] == best_experiment]
        best = best_rows.iloc[0] if not best_rows.empty else None
        base_us = _number(base["latency_us"]) if base is not None else None
        best_us = _number(best["latency_us"]) if best is not None else None
        kept = rows[rows["status"] == "keep"]
        targets.append(TargetReport(
            tag=target.tag,
            kernel_type=target.kernel_type,
            status=target.status,
            share=plan_target.share,
            shape="x".join(str(d) for d in plan_target.bench_shape),
            dtype=plan_target.dtype,
            experiments=int((rows["status"] != "baseline").sum()),
            keeps=len(kept),
            failed=int(rows["status"].isin(FAILED_STATUSES).sum()),
            baseline_experiment=int(base["experiment"]) if base is not None else None,
            baseline_us=base_us,
            best_experiment=best_experiment,
            best_us=best_us,
            best_description=str(best["description"]) if best is not None else "",
            best_commit=str(best["commit"]) if best is not None else "",
            vs_baseline=progress_series(rows).best_level if not rows.empty else None,
            speedup_vs_eager=_number(best["speedup_vs_pytorch"]) if best is not None else None,
            speedup_vs_compile=_number(best["speedup_vs_compile"]) if best is not None else None,
            pct_peak=_number(best["pct_peak"]) if best is not None else None,
            pct_peak_measured=(_number(best["pct_peak_measured"]) if best is not None
                               else None),
            stop_rule=target.stop_rule,
            stop_reason=target.stop_reason,
            seconds=target.seconds,
            kernel_file=target.kernel_file,
            kept=[(int(r["experiment"]), str(r["description"])) for _, r in kept.iterrows()],
        ))
    config = run.info.get("config", {})
    cost = frame["cost_usd"].fillna(0).sum() if "cost_usd" in frame else 0.0
    return RunReport(
        run_tag=run.state.run_tag,
        root=run.root,
        model=str(run.info.get("model_copy", "")),
        class_name=run.class_name,
        device=run.device,
        dtype=run.dtype,
        gpu=run.info.get("gpu") or run.plan.gpu,
        agent=config.get("agent", ""),
        timing_meaningful=run.device == "cuda",
        experiments=len(frame),
        run_seconds=run.state.run_seconds,
        finished=run.state.finished,
        stop_reason=run.state.stop_reason,
        cost_usd=float(cost),
        targets=targets,
        verify=read_result(run.root),
        frame=frame,
    )


# ---------------------------------------------------------------------------------------------
# Formatting


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}%"


def _peak(t: TargetReport) -> str:
    if t.pct_peak is None and t.pct_peak_measured is None:
        return "–"
    if t.pct_peak_measured is None:
        return _pct(t.pct_peak)
    return f"{_pct(t.pct_peak)} ({_pct(t.pct_peak_measured)} measured)"


# The table, as report.md and the terminal show it (the terminal abbreviates the headers when
# they do not fit, with their legend below: autokernel.tables).
TABLE_COLUMNS = (
    Column("target"), Column("share", justify="right", drop=1),
    Column("best"),
    Column("× baseline (keep rule)", "×base", justify="right", legend=ABBREVIATIONS["×base"]),
    Column("× eager", "×eager", justify="right"), Column("× compile", "×compile", justify="right"),
    Column("% of peak", "%peak", justify="right", drop=2),
    Column("experiments", "exp", justify="right"), Column("kept", justify="right"),
    Column("failed", justify="right", drop=1), Column("time", justify="right", drop=2),
    Column("stop", wrap=True),
)
# Said once under the table, wherever it is shown.
FIGURES_NOTE = ("× baseline is the keep rule's figure (paired, call-weighted speedups chained "
                "over the keeps, as in progress.png); × eager, × compile and % of peak are the "
                "best kernel's at its primary profiled shape, as in results.tsv")


def _not_started(t: TargetReport) -> bool:
    """A target the run has not reached yet (e.g. after Ctrl-C): not a failure."""
    return t.status == "pending" and t.baseline_experiment is None


def _table_row(t: TargetReport) -> list[str]:
    stop = t.stop_rule or (status_text(t.status) if t.status != "done" else "–")
    if _not_started(t):
        stop = "not started yet"
    return [t.tag, f"{t.share * 100:.1f}%",
            f"exp {t.best_experiment}" if t.best_experiment is not None else "–",
            format_speedup(t.vs_baseline), format_speedup(t.speedup_vs_eager),
            format_speedup(t.speedup_vs_compile), _peak(t),
            str(t.experiments), str(t.keeps), str(t.failed), format_duration(t.seconds), stop]


def _run_state(report: RunReport, with_stop_reason: bool) -> str:
    """'finished (every target is done)' only when no target is left waiting; otherwise what
    stopped the run and what was not reached."""
    reason = f" ({report.stop_reason})" if report.stop_reason and with_stop_reason else ""
    if report.complete:
        return f"finished{reason}"
    waiting = report.not_started
    if not report.finished:
        return f"not finished{reason}"
    return (f"stopped{reason} with {count_of(len(waiting), 'target')} not started "
            f"({', '.join(t.tag for t in waiting)})")


def _headline(report: RunReport, *, with_stop_reason: bool = True) -> str:
    rate = report.experiments_per_hour
    where = report.gpu or report.device
    text = (f"{report.model} ({report.class_name}), {report.dtype} on {where}, "
            f"agent {report.agent}: {count_of(report.experiments, 'experiment')}"
            # Each target's count leaves its baseline out: say how many there are, so the
            # per-target counts add up to this one.
            f" ({count_of(report.baselines, 'baseline')}) in "
            f"{format_duration(report.run_seconds)}"
            + (f", {rate:.0f} an hour" if rate else "")
            + f"; {_run_state(report, with_stop_reason)}")
    if report.cost_usd:
        text += f"; LLM cost ${report.cost_usd:.2f}"
    return text


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(markdown_cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in rows]


def markdown(report: RunReport, plot_name: str = PLOT_FILE) -> str:
    from autokernel.integrate.end_to_end import end_to_end_lines, selection_markdown
    from autokernel.integrate.verify_result import routed_where

    lines = [f"# autokernel report: {markdown_cell(report.run_tag)}", "",
             markdown_cell(_headline(report)) + ".", ""]
    if not report.timing_meaningful:
        lines += [f"> {markdown_cell(CPU_TIMING_NOTE)}.", ""]
    lines += ["## Targets", ""]
    lines += _md_table([c.header for c in TABLE_COLUMNS], [_table_row(t) for t in report.targets])
    lines += ["", markdown_cell(FIGURES_NOTE) + ".", ""]
    lines += gpus_section(report.root)
    lines += ["## End to end", ""]
    if report.verify:
        v = report.verify
        accuracy = v["accuracy"]
        lines.append(markdown_cell(
            f"From verify.json ({v.get('created', '')}, {v['dtype']} on "
            f"{v.get('gpu') or v['device']}): output "
            f"{'PASS' if accuracy['passed'] else 'FAIL'} (relative error vs the "
            f"{accuracy['oracle']} oracle: original {accuracy['error_original']:.2e}, "
            f"patched {accuracy['error_patched']:.2e}); "
            f"{count_of(v['routed_calls_per_forward'], 'kernel call')} routed per forward."))
        if report.stale_verify:
            lines += ["", f"> **Stale:** {markdown_cell(report.stale_verify)}."]
        lines += ["", "```"] + end_to_end_lines(v, cpu_note=False) + ["```", ""]
        lines += _md_table(["kernel", "routed", "calls/forward", "backward"],
                           [[row["tag"], routed_where(row), str(row["calls_per_forward"]),
                             row["backward_description"]] for row in v["kernels"]])
        selection = selection_markdown(v)
        lines += [""] + selection if selection else []
    else:
        lines.append(f"Not verified yet: run `autokernel verify {report.root}`.")
    from autokernel.integrate.progress_plot import CAPTION

    lines += ["", "## Progress", "", f"![progress]({plot_name})", "", CAPTION, "",
              "## Details", ""]
    for t in report.targets:
        lines.append(f"### {markdown_cell(t.tag)}")
        lines.append("")
        lines.append(markdown_cell(f"- {t.kernel_type} at {t.shape} {t.dtype}, "
                                   f"{t.share * 100:.1f}% of the model's time; "
                                   f"{status_text(t.status)}"))
        if t.best_experiment is not None:
            latency = (f"; {format_latency(t.best_us)} at {t.shape}, the primary shape "
                       "(results.tsv's latency_us)" if t.best_us is not None else "")
            lines.append(markdown_cell(f"- best: experiment {t.best_experiment} (commit "
                                       f"{t.best_commit[:12]}), {t.best_description}{latency}"))
        if t.kernel_file:
            lines.append(f"- kernel: `{t.kernel_file}`")
        if t.kept:
            lines.append("- kept: " + "; ".join(markdown_cell(f"{n}: {d}") for n, d in t.kept))
        if t.stop_reason:
            lines.append(f"- stopped: {markdown_cell(t.stop_reason)}")
        lines.append("")
    return "\n".join(lines) + "\n"


def gpus_section(root: Path) -> list[str]:
    """A run with --gpus or --ray: per GPU its experiments, rate, idle time and targets, over
    every session (autokernel.parallel.board); nothing for a one-GPU run."""
    from autokernel.loop.workspace import CACHE_DIR
    from autokernel.parallel.board import BOARD_FILE, REPORT_HEADER, report_rows

    rows = report_rows(root / CACHE_DIR / BOARD_FILE)
    if not rows:
        return []
    return ["## GPUs", "", *_md_table(REPORT_HEADER, rows), "",
            "Experiments an hour and idle share over the time each worker was up, every "
            "session added; lost: times the worker died and its experiment was judged again.",
            ""]


def plot_progress(report: RunReport, path: Path) -> Path:
    """progress.png, in the keep rule's figure (`autokernel.integrate.progress_plot`)."""
    from autokernel.integrate.progress_plot import plot_progress as draw

    return draw(report, path)


def write_report(report: RunReport) -> tuple[Path, Path]:
    plot = plot_progress(report, report.root / PLOT_FILE)
    text = report.root / REPORT_FILE
    text.write_text(markdown(report, plot.name), encoding="utf-8")
    return text, plot


def print_summary(report: RunReport, console: Console, *, with_stop_reason: bool = True,
                  with_cpu_note: bool = True) -> None:
    """The report on the terminal: headline, the Targets table fitted to the console's width,
    end-to-end figures. `with_stop_reason=False` / `with_cpu_note=False` where the caller has
    said why the run stopped / that its figures are CPU figures already."""
    from autokernel.integrate.verify_result import print_end_to_end

    console.print(_headline(report, with_stop_reason=with_stop_reason), highlight=False)
    if with_cpu_note and not report.timing_meaningful:
        console.print(f"[yellow]{CPU_TIMING_NOTE}[/]")
    console.print(fit_table(TABLE_COLUMNS, [_table_row(t) for t in report.targets],
                            console.width, notes=[FIGURES_NOTE + "."]))
    if report.verify:
        if report.stale_verify:
            console.print(f"[yellow]stale: {report.stale_verify}[/]")
        print_end_to_end(report.verify, console, cpu_note=False)
    else:
        console.print(f"end to end: not verified yet (autokernel verify {report.root})",
                      highlight=False)


def report_at_end_of_run(root: Path, console: Console) -> None:
    """What `autokernel run` prints last: the summary, with report.md and progress.png written.

    A report failure never fails the run: it is one line, and `autokernel report DIR` remains.
    """
    from autokernel.integrate.loader import open_run

    try:
        report = build_report(open_run(root))
        text, plot = write_report(report)
    except Exception as exc:  # the run itself is done and saved; say why the report is missing
        console.print(f"[yellow]report not written: {exc}[/]", highlight=False)
        return
    print_summary(report, console)
    for line in (f"report: {text}", f"plot: {plot}"):  # a path a line: never broken
        console.print(line, highlight=False, soft_wrap=True)
