"""`autokernel run --ray ADDRESS` on a local Ray cluster on the CPU: two Ray actors, each holding
one unit of a custom resource that stands in for a GPU, judge the experiments of a one-target
night side by side (autokernel.parallel.ray_backend). One actor's process is killed with SIGKILL
while it judges: Ray restarts it and the experiment is judged again. The run's results.tsv and
git log have the shape of a local run's; the head alone writes them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from test_parallel_cpu import (MODEL, PLAN, busy_worker, check_run, read_json, start_cli,
                               wait_until)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="Ray is not installed (pip install -e '.[ray]')")


@pytest.fixture
def ray_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A Ray cluster of this machine (2 CPUs, 2 units of the stand-in resource), its address."""
    import ray

    from autokernel.parallel.ray_backend import CPU_WORKER_RESOURCE

    # A test cluster of this machine alone: no token to write under ~/.ray, no usage report.
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    # Ray's socket paths must stay under 108 bytes: a short directory of its own.
    temp = tempfile.mkdtemp(prefix="akray-")
    context = ray.init(num_cpus=2, resources={CPU_WORKER_RESOURCE: 2}, include_dashboard=False,
                       log_to_driver=False, configure_logging=False, _temp_dir=temp)
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_ray_workers_judge_side_by_side_and_a_killed_actor_is_judged_again(
        tmp_path: Path, ray_cluster: str) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "run.log"
    proc = start_cli(["run", str(MODEL), "--plan", str(PLAN), "--device", "cpu", "--only",
                      "softmax", "--agent",
                      "tuner", "--max-experiments-per-target", "2", "--gpus", "2", "--ray",
                      ray_cluster, "--out", str(run_dir), "--no-live", "--bench-timeout", "120"],
                     log)
    worker = wait_until(proc, log, "an actor busy after the baseline",
                        lambda: busy_worker(run_dir, 1), timeout=400)
    os.kill(worker["pid"], signal.SIGKILL)
    assert proc.wait(timeout=400) == 0, log.read_text()[-3000:]
    output = log.read_text()
    assert "2 workers (ray)" in output
    assert f"worker {worker['label']} was lost" in output and "is judged again" in output
    state, rows = check_run(run_dir, 3, labels=lambda gpu: gpu.split("/")[-1] in ("cpu0", "cpu1"))
    assert [r["status"] for r in rows][0] == "baseline" and state.finished
    assert state.targets[0].experiments == 2
    board = read_json(run_dir / ".cache" / "gpus.json")
    assert sum(w["lost"] for w in board.values()) == 1 and len(board) == 2
    assert board[worker["label"]]["lost"] == 1  # the killed actor, and no other
    # Each candidate row names the actor that judged it. Which actor judges the lost experiment
    # again is the scheduler's choice (the first one free: often the other actor, when it finished
    # its own candidate before Ray restarted the killed one), so the two rows may share one.
    assert {r["gpu"] for r in rows[1:]} <= set(board)
    # The actors' directories on the node are gone with them.
    assert not (Path(tempfile.gettempdir()) / f"autokernel-{state.run_tag}").exists()
