"""`autokernel run --gpus 2` on the CPU, end to end: two Triton-interpreter workers stand in for
two GPUs (the real worker processes, harness, tuner and CLI; autokernel.parallel).

Two targets run at once, one per worker. One worker is killed with SIGKILL while it judges an
experiment: the experiment is judged again on its restarted worker. Then the head is killed with
SIGKILL (its workers die with it), and `autokernel resume` finishes the run: results.tsv, the git
log and state.json agree, every row says which worker judged it, and no experiment is missing or
recorded twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autokernel.loop.results import read_rows
from autokernel.loop.state import RunState

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "tests" / "fixtures" / "models" / "two_cheap_targets.py"
PLAN = ROOT / "tests" / "fixtures" / "plans" / "two_cheap_targets.json"  # its profile, saved


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def start_cli(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    environ = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1", **(env or {}))
    environ.pop("ANTHROPIC_API_KEY", None)
    return subprocess.Popen([sys.executable, "-m", "autokernel", *args], cwd=ROOT, env=environ,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def wait_until(proc: subprocess.Popen, log: Path, what: str, ready: Callable[[], Any],
               timeout: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"the run ended ({proc.returncode}) before {what}:\n"
                        f"{log.read_text()[-3000:]}")
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"no {what} after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def busy_worker(run_dir: Path, at_least: int) -> dict[str, Any] | None:
    """A worker judging an experiment once `at_least` experiments are recorded."""
    if read_json(run_dir / "state.json").get("next_experiment", 0) < at_least:
        return None
    workers = read_json(run_dir / ".cache" / "gpus.json").values()
    return next((w for w in workers if w.get("target") and w.get("pid")), None)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def check_run(run_dir: Path, rows_expected: int,
              labels: Callable[[str], bool] = lambda gpu: gpu in ("cpu0", "cpu1"),
              ) -> tuple[RunState, list[dict[str, str]]]:
    """results.tsv rows 0..N-1 once each; the commit of every kept row, and only those, on the
    branch; HEAD the last kept commit; a clean tree; each row's worker in the gpu column."""
    state = RunState.load(run_dir / "state.json")
    rows = read_rows(run_dir / "results.tsv")
    assert [int(r["experiment"]) for r in rows] == list(range(rows_expected))
    assert state.next_experiment == rows_expected and state.in_flight is None
    subjects = dict(line.split(" ", 1) for line in
                    git(run_dir, "log", "--format=%H %s").splitlines())
    committed = {r["commit"]: r for r in rows if r["status"] in ("baseline", "keep")}
    for sha, row in committed.items():
        assert subjects[sha].startswith(f"exp {row['experiment']} {row['tag']}: ")
    assert {sha for sha, s in subjects.items() if s.startswith("exp ")} == set(committed)
    assert git(run_dir, "rev-parse", "HEAD") == state.head
    assert git(run_dir, "status", "--porcelain") == ""
    assert all(labels(r["gpu"]) for r in rows), [r["gpu"] for r in rows]
    return state, rows


@pytest.mark.slow
def test_two_workers_run_two_targets_and_survive_a_killed_worker_and_head(
        tmp_path: Path) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "run.log"
    proc = start_cli(["run", str(MODEL), "--plan", str(PLAN), "--device", "cpu", "--top", "2",
                      "--agent", "tuner", "--max-experiments-per-target", "1", "--gpus", "2",
                      "--out", str(run_dir), "--no-live", "--bench-timeout", "120"], log)
    # Two targets at once, one on each worker.
    judged = wait_until(proc, log, "two targets judged at once", lambda: len({
        w.get("target") for w in read_json(run_dir / ".cache" / "gpus.json").values()
        if w.get("target")}) == 2)
    assert judged
    # A worker judging while one verdict is recorded: kill it.
    worker = wait_until(proc, log, "a worker busy after the first verdict",
                        lambda: busy_worker(run_dir, 1))
    os.kill(worker["pid"], signal.SIGKILL)
    # Later, with the second target under way, kill the head.
    wait_until(proc, log, "a worker busy after three verdicts",
               lambda: busy_worker(run_dir, 3) if read_json(
                   run_dir / ".cache" / "gpus.json").get(worker["label"], {}).get("pid")
               else None)
    pids = [w["pid"] for w in read_json(run_dir / ".cache" / "gpus.json").values()]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in pids), "a worker outlived its head"
    output = log.read_text()
    assert f"worker {worker['label']} was lost" in output and "is judged again" in output

    # On one worker this time (--gpus on resume overrides the run's; CI's CPU time is short).
    proc = start_cli(["resume", str(run_dir), "--no-live", "--gpus", "1"], log)
    assert proc.wait(timeout=400) == 0, log.read_text()[-3000:]
    state, rows = check_run(run_dir, 4)
    assert state.finished and state.sessions == 2
    tags = [t.tag for t in state.targets]
    assert sorted((r["tag"], r["status"]) for r in rows if r["status"] == "baseline") == \
        sorted((tag, "baseline") for tag in tags)
    for target in state.targets:
        assert target.status == "done" and target.stop_rule == "experiments"
        assert target.experiments == 1
    board = read_json(run_dir / ".cache" / "gpus.json")
    assert sum(w["lost"] for w in board.values()) == 1
    assert sum(w["experiments"] for w in board.values()) >= 4
    assert read_json(run_dir / "run.json")["config"]["gpus"] == "2"
    assert "## GPUs" in (run_dir / "report.md").read_text()
