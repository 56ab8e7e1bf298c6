"""The end of `autokernel run` and `autokernel resume`: one summary, said once.

    stopped: <why the run stopped>
    the report's headline and per-target figures (the same figures as results.tsv, report.md
    and the dashboard: each target's best row, at its primary profiled shape)
    LLM usage, where an LLM agent ran
    where the report, the plot, results.tsv and the git log are
    continue with: autokernel resume DIR      (when the run was interrupted; with --hours when
                                              its time is spent and targets still wait)

report.md and progress.png are written on the way; a report failure is one line and never fails
the run (`autokernel report DIR` remains).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autokernel.loop.state import RunState
from autokernel.loop.workspace import Workspace

if TYPE_CHECKING:
    from rich.console import Console


def resume_hint(workspace: Workspace, state: RunState) -> str:
    """How to continue: a plain resume after an interruption; with more hours when the run's
    time is spent and targets still wait ("" when nothing is left to do)."""
    command = f"continue with: autokernel resume {workspace.root}"
    if not state.finished:
        return command
    if any(t.status == "pending" for t in state.targets) and state.hours:
        return f"{command} --hours {more_hours(state.hours)}"
    return ""


def more_hours(hours: float) -> str:
    """A budget worth suggesting to a run whose `hours` are spent: twice as long."""
    return f"{2 * hours:g}"


def print_end_of_run(workspace: Workspace, state: RunState, reason: str, console: Console, *,
                     llm_usage: str = "") -> None:
    from autokernel.loop.results import read_rows

    console.print(f"stopped: {reason}", highlight=False, soft_wrap=True)
    written: list[str] = []
    if read_rows(workspace.results_path):
        written = _write_report(workspace, console)
    else:
        console.print("no report: no experiment has finished yet", highlight=False)
    if llm_usage:
        console.print(f"LLM usage: {llm_usage}", highlight=False, soft_wrap=True)
    # One path a line, never wrapped: a path broken across lines does not paste.
    for line in [*written, f"results: {workspace.results_path}",
                 f"git log: git -C {workspace.root} log --oneline"]:
        console.print(line, highlight=False, soft_wrap=True)
    hint = resume_hint(workspace, state)
    if hint:  # never wrapped: a command broken across lines pastes as two
        console.print(hint, highlight=False, soft_wrap=True)


def _write_report(workspace: Workspace, console: Console) -> list[str]:
    """report.md and progress.png, and the summary; the lines saying where they are ([] when
    the report could not be written: the run itself is done and saved, so that is one line)."""
    from autokernel.integrate.loader import open_run
    from autokernel.integrate.report import build_report, print_summary, write_report

    try:
        report = build_report(open_run(workspace.root))
        text, plot = write_report(report)
    except Exception as exc:
        console.print(f"[yellow]report not written: {exc}[/]", highlight=False)
        return []
    # The run said at its start that a CPU run's figures are host-clock figures.
    print_summary(report, console, with_stop_reason=False, with_cpu_note=False)
    return [f"report: {text}", f"plot: {plot}"]
