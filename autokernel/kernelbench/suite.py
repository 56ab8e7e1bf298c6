"""A set of problems, each in its own child process and workspace: `run_suite`.

Layout of the set's directory OUT:

    OUT/<problem>/             the problem's run workspace (a git repo; `autokernel report`,
                               `verify`, `resume` and `export` work on it), or just plan.json
                               when the problem has nothing to optimize
    OUT/logs/<problem>.log     the child's output: the loop's log lines, verify's, tracebacks
    OUT/logs/<problem>.json    the child's record (and its job, <problem>.job.json)
    OUT/results.{md,json,tsv}  the table, rewritten after every problem

A child that dies without a record (a signal, an exit), or outlives its hard time limit, is
recorded as crashed or timed out with a one-line reason: the set always goes on.

A set resumes (`finished_records`): a problem whose record is in logs/ keeps it, and one that
was interrupted or never ended (the machine went away) starts again in a fresh workspace.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from autokernel.kernelbench.problem import (
    CRASHED,
    INTERRUPTED,
    TIMEOUT,
    ProblemJob,
    new_record,
)
from autokernel.kernelbench.progress import Phase, read_phase

LOGS_DIR = "logs"
WATCH_INTERVAL_S = 3.0  # how often a running problem's log is read for its phase
STOP_POLL_S = 0.5  # how often a problem run in a thread looks for the set's stop
# Profiling a large model, torch.compile of four contestants in verify and a harness run that
# outlives the loop's clock all come on top of the loop's budget.
HARD_LIMIT_GRACE_S = 900.0


class SuiteError(ValueError):
    """Bad input for the set (no problem file, an unusable OUT); one line for the user."""


class SuiteInterrupted(Exception):
    """Ctrl-C during a problem; carries that problem's record."""

    def __init__(self, record: dict[str, Any]) -> None:
        super().__init__(record["reason"])
        self.record = record


def discover_problems(paths: Iterable[Path]) -> list[Path]:
    """Problem files: each file given, and the *.py files of each directory (sorted, not
    recursive, skipping names that start with '_' or '.')."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.glob("*.py")
                                if p.is_file() and not p.name.startswith(("_", "."))))
        elif path.is_file():
            found.append(path)
        else:
            raise SuiteError(f"no such problem file or directory: {path}")
    if not found:
        raise SuiteError("no problem files (*.py) in " + ", ".join(str(p) for p in paths))
    return [p.resolve() for p in found]


def problem_names(problems: list[Path]) -> list[str]:
    """A directory name per problem: its stem, with -2, -3... where stems repeat."""
    names: list[str] = []
    for path in problems:
        name, n = path.stem, 1
        while name in names:
            n += 1
            name = f"{path.stem}-{n}"
        names.append(name)
    return names


def finished_records(out: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """The records an earlier run of the set in `out` left for `names`: every outcome counts
    (a crash or a timeout is the problem's result) except an interruption."""
    records: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            record = json.loads((out / LOGS_DIR / f"{name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("status") not in (None, INTERRUPTED):
            records[name] = record
    return records


def hard_limit_s(minutes: float) -> float:
    return 2 * minutes * 60.0 + HARD_LIMIT_GRACE_S


def _last_line(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    return next((line for line in reversed(lines) if line), "")[:200]


def _stop_child(child: subprocess.Popen) -> None:
    """Kill the child's whole process group (the harness's workers included)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()


def _wait(child: subprocess.Popen, log: Path, limit_s: float,
          watch: Callable[[Phase], None] | None, stop: threading.Event | None = None) -> int:
    """The child's exit status; `watch` gets the problem's phase every few seconds meanwhile.
    Raises subprocess.TimeoutExpired past `limit_s`, and KeyboardInterrupt once `stop` is set
    (a problem run in a thread: Ctrl-C reaches the main thread only)."""
    deadline = time.monotonic() + limit_s
    interval = WATCH_INTERVAL_S if stop is None else STOP_POLL_S
    last_watch = time.monotonic()
    while True:
        try:
            return child.wait(timeout=min(interval, max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt from None
            if watch is not None and time.monotonic() - last_watch >= WATCH_INTERVAL_S:
                last_watch = time.monotonic()
                watch(read_phase(log))


def run_one(job: ProblemJob, log: Path, limit_s: float,
            watch: Callable[[Phase], None] | None = None, env: dict[str, str] | None = None,
            stop: threading.Event | None = None) -> dict[str, Any]:
    """Run `job` in a child process; its record, or one saying why there is none. `watch` is
    told the problem's phase (from its log) every few seconds while it runs. `env`: added to
    the child's environment (a GPU's pin); `stop`: set, the child is stopped as by Ctrl-C."""
    job_path = log.with_suffix(".job.json")
    job.save(job_path)
    result_path = Path(job.result_path)
    result_path.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    if job.device == "cpu":
        from autokernel.device import interpreter_env

        env.update(interpreter_env())
    started = time.perf_counter()
    with open(log, "ab") as out:
        # A session of its own: Ctrl-C in the terminal reaches the suite only, and a kill
        # reaches every process the problem started.
        child = subprocess.Popen(
            [sys.executable, "-m", "autokernel.kernelbench.problem", str(job_path)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )
        try:
            code = _wait(child, log, limit_s, watch, stop)
        except subprocess.TimeoutExpired:
            _stop_child(child)
            record = new_record(job)
            record.update(status=TIMEOUT, reason=f"still running after {limit_s / 60:.0f} min "
                          f"(the hard limit); last log line: {_last_line(log)}")
            record["seconds"] = round(time.perf_counter() - started, 1)
            return record
        except KeyboardInterrupt:
            _stop_child(child)
            record = new_record(job)
            record.update(status=INTERRUPTED, reason="interrupted (Ctrl-C); continue its run "
                          f"with `autokernel resume {job.workspace}`")
            record["seconds"] = round(time.perf_counter() - started, 1)
            raise SuiteInterrupted(record) from None
    try:
        return json.loads(result_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = new_record(job)
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        record.update(status=CRASHED, reason=f"the problem's process ended without a result "
                      f"({how}); last log line: {_last_line(log)}")
        record["seconds"] = round(time.perf_counter() - started, 1)
        return record


def run_suite(problems: list[Path], out: Path, template: ProblemJob,
              on_record: Callable[[int, dict[str, Any], list[dict[str, Any]]], None],
              on_start: Callable[[int, Path], None] = lambda i, p: None,
              finished: dict[str, dict[str, Any]] | None = None,
              on_phase: Callable[[int, Phase], None] | None = None) -> list[dict[str, Any]]:
    """Run every problem in turn; call `on_record(i, record, records so far)` after each, and
    `on_phase(i, phase)` every few seconds while one runs.

    `template` carries the shared settings; problem, workspace and result path are filled in
    per problem. A problem named in `finished` (a resumed set) keeps that record and does not
    run; any other problem starts in a new workspace, so a partial one from an interrupted run
    is removed first. Raises SuiteInterrupted (with the records so far passed to on_record) on
    Ctrl-C.
    """
    finished = finished or {}
    logs = out / LOGS_DIR
    logs.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    for i, (path, name) in enumerate(zip(problems, problem_names(problems))):
        if name in finished:
            records.append(finished[name])
            on_record(i, finished[name], records)
            continue
        job = replace(template, problem=str(path), workspace=str(out / name),
                      result_path=str(logs / f"{name}.json"))
        if (out / name).exists():
            shutil.rmtree(out / name)
        on_start(i, path)
        interrupted = None
        try:
            record = run_one(job, logs / f"{name}.log", hard_limit_s(template.minutes),
                             watch=None if on_phase is None else
                             (lambda phase, i=i: on_phase(i, phase)))
        except SuiteInterrupted as stop:
            record, interrupted = stop.record, stop
        record.update(problem=name, log=str(logs / f"{name}.log"))
        records.append(record)
        on_record(i, record, records)
        if interrupted is not None:
            raise interrupted
    return records
