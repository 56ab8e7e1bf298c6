"""Failed attempts kept readable: attempts/NNNN/ holds what an experiment tried and why it failed.

results.tsv keeps one line of reason and a revert removes the failed kernel.py from the tree, so
the next conversation would see "line 31: ..." of a file that no longer exists. attempts/ is
git-ignored (a revert keeps it), and the agents' read_file can open it:

    attempts/NNNN/kernel.py        the source the harness judged (fail, crash, timeout, rejected)
    attempts/NNNN/error.txt        its verdict: status, stage, rule, reason, the stages, and the
                                   whole error text the harness kept (traceback, compiler message)
    attempts/NNNN/draft-K.py       a draft the claude agent's compile_kernel / test_kernel failed
    attempts/NNNN/draft-K.error.txt  during that experiment, with that check's answer
"""

from __future__ import annotations

from pathlib import Path

from autokernel.files import atomic_write_text
from autokernel.harness.result import BenchResult
from autokernel.loop.results import FAILED_STATUSES
from autokernel.loop.workspace import Workspace

KERNEL_NAME = "kernel.py"
ERROR_NAME = "error.txt"


def attempt_folder(root: Path, experiment: int) -> Path:
    return Workspace(root).attempt_dir(experiment)


def error_file(experiment: int) -> str:
    """The workspace-relative path of an experiment's error.txt, as the prompt names it."""
    anywhere = Path("/")
    return (attempt_folder(anywhere, experiment) / ERROR_NAME).relative_to(anywhere).as_posix()


def error_text(experiment: int, verdict: str, reason: str, result: BenchResult | None) -> str:
    """What error.txt says: the verdict, then everything the harness kept about the failure."""
    lines = [f"experiment {experiment}: {verdict}"]
    if result is not None:
        lines.append(f"status: {result.status.value}; stage: {result.stage or '-'}"
                     + (f"; rule: {result.rule}" if result.rule else ""))
        if result.stages:
            lines.append("stages: " + ", ".join(f"{k} {v}" for k, v in result.stages.items()))
        lines.append(f"reason: {result.reason}")
    if reason and (result is None or reason != result.reason):
        lines.append(f"verdict: {reason}")
    if result is not None and result.detail:
        lines += ["", "full error:", result.detail.rstrip()]
    return "\n".join(lines) + "\n"


def record_attempt(root: Path, experiment: int, source: str, verdict: str | None, reason: str,
                   result: BenchResult | None) -> Path | None:
    """Save a failed experiment's kernel.py and error.txt; None (nothing written) for any other
    verdict, or when no kernel was judged (the agent produced none)."""
    if verdict not in FAILED_STATUSES or not source or result is None:
        return None
    folder = attempt_folder(root, experiment)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / KERNEL_NAME, source, durable=False)
    atomic_write_text(folder / ERROR_NAME, error_text(experiment, verdict, reason, result),
                      durable=False)
    return folder


def save_failed_drafts(root: Path, experiment: int, drafts: list[tuple[str, str, str]]) -> None:
    """Save (tool, source, answer) drafts as draft-K.py and draft-K.error.txt, K counting on from
    the drafts already there (several conversations may draft for one experiment number)."""
    if not drafts:
        return
    folder = attempt_folder(root, experiment)
    folder.mkdir(parents=True, exist_ok=True)
    first = len(list(folder.glob("draft-*.py"))) + 1
    for number, (tool, source, answer) in enumerate(drafts, start=first):
        atomic_write_text(folder / f"draft-{number}.py", source, durable=False)
        atomic_write_text(folder / f"draft-{number}.error.txt", f"{tool}:\n{answer.rstrip()}\n",
                          durable=False)
