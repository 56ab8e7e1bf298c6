"""The end of `autokernel run` and `autokernel resume`: one summary, said once.

    stopped: <why the run stopped>
    the report's headline and per-target figures (the same figures as results.tsv, report.md
    and the dashboard: each target's best row, at its primary profiled shape)
    LLM usage, where an LLM agent ran
    where the report, the plot, results.tsv and the git log are
    continue with: autokernel resume DIR      (only when the run is not finished)

report.md and progress.png are written on the way; a report failure is one line and never fails
the run (`autokernel report DIR` remains).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autokernel.loop.state import RunState
from autokernel.loop.workspace import Workspace

if TYPE_CHECKING:
    from rich.console import Console


def resume_hint(workspace: Workspace) -> str:
    return f"continue with: autokernel resume {workspace.root}"


def print_end_of_run(workspace: Workspace, state: RunState, reason: str, console: Console, *,
                     llm_usage: str = "") -> None:
    from autokernel.integrate.loader import open_run
    from autokernel.integrate.report import build_report, print_summary, write_report

    console.print(f"stopped: {reason}", highlight=False, soft_wrap=True)
    written = ""
    try:
        report = build_report(open_run(workspace.root))
        text, plot = write_report(report)
    except Exception as exc:  # the run itself is done and saved; say why the report is missing
        console.print(f"[yellow]report not written: {type(exc).__name__}: {exc}[/]")
    else:
        # The run said at its start that a CPU run's figures are host-clock figures.
        print_summary(report, console, with_stop_reason=False, with_cpu_note=False)
        written = f"report: {text}  ·  plot: {plot}  ·  "
    if llm_usage:
        console.print(f"LLM usage: {llm_usage}", highlight=False, soft_wrap=True)
    console.print(f"{written}results: {workspace.results_path}  ·  git log: git -C "
                  f"{workspace.root} log --oneline", highlight=False, soft_wrap=True)
    if not state.finished:
        # Never wrapped: a command broken across lines pastes as two.
        console.print(resume_hint(workspace), highlight=False, soft_wrap=True)
