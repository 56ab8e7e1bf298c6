"""The overnight loop end to end on the CPU interpreter: real profiler, harness and tuner.

- `autokernel run` on the tiny LLaMA, killed with SIGKILL in the middle of an experiment, resumed,
  stopped with Ctrl-C (SIGINT), resumed again to the end: results.tsv and the git branch agree
  at every stop, and no experiment is lost or counted twice.
- A crashing and a hanging candidate are recorded (crash / timeout), reverted, and the run goes on.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from autokernel.agents.base import AgentContext, Proposal
from autokernel.agents.tuner import TunerAgent
from autokernel.harness.result import BenchResult
from autokernel.loop.dashboard import PlainDashboard
from autokernel.loop.results import ResultsLog, read_rows
from autokernel.loop.config import LoopConfig
from autokernel.loop.runner import Runner
from autokernel.loop.state import RunState, TargetState
from autokernel.loop.workspace import BRANCH_PREFIX, Workspace
from autokernel.orchestrate import MoveOnConfig
from autokernel.profiling.plan import CallSite, Plan, Target

ROOT = Path(__file__).resolve().parents[1]
TINY_LLAMA = ROOT / "examples" / "models" / "tiny_llama.py"
STATUSES = {"baseline", "keep", "revert", "fail", "crash", "timeout", "rejected"}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def assert_consistent(root: Path) -> tuple[RunState, list[dict[str, str]]]:
    """What must hold whenever the loop is not running: rows 0..N-1 each once, every kept row's
    commit on the branch (and every experiment commit with its row), HEAD the last kept commit,
    kernel.py HEAD's."""
    state = RunState.load(root / "state.json")
    assert state.in_flight is None or state.in_flight.phase == "written"
    rows = read_rows(root / "results.tsv")
    assert [int(r["experiment"]) for r in rows] == list(range(state.next_experiment))
    assert {r["status"] for r in rows} <= STATUSES
    # What a passing kernel launched at the primary shape: the tuner learns inert tunables from it.
    assert all(re.fullmatch(r"[0-9a-f]{16}", r["launch_digest"]) for r in rows
               if r["correctness"] == "PASS")
    subjects = dict(line.split(" ", 1) for line in git(root, "log", "--format=%H %s").splitlines())
    committed = {r["commit"]: r for r in rows if r["status"] in ("baseline", "keep")}
    for sha, row in committed.items():
        assert subjects[sha].startswith(f"exp {row['experiment']} {row['tag']}: ")
    experiment_commits = {sha for sha, s in subjects.items() if s.startswith("exp ")}
    assert experiment_commits == set(committed)
    assert git(root, "rev-parse", "HEAD") == state.head
    if state.in_flight is None:
        assert git(root, "status", "--porcelain") == ""
    else:  # killed mid-experiment: the candidate is in kernel.py, and in the journal
        assert git(root, "status", "--porcelain") in ("", "M kernel.py")
        assert (root / "kernel.py").read_text() in (state.in_flight.source,
                                                    git(root, "show", "HEAD:kernel.py") + "\n")
    return state, rows


def start_cli(args: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    env.pop("ANTHROPIC_API_KEY", None)
    handle = open(log, "ab")
    return subprocess.Popen([sys.executable, "-m", "autokernel", *args], cwd=ROOT, env=env,
                            stdout=handle, stderr=subprocess.STDOUT)


def wait_for_in_flight(proc: subprocess.Popen, state_path: Path, *, min_experiment: int,
                       log: Path, timeout: float = 300.0) -> int:
    """Poll state.json until an experiment >= min_experiment is being benchmarked."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the run ended early ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            flight = json.loads(state_path.read_text()).get("in_flight")
        except (OSError, ValueError):
            flight = None
        if flight and flight["experiment"] >= min_experiment and flight["phase"] == "written":
            return int(flight["experiment"])
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"no experiment {min_experiment} in flight after {timeout:.0f} s:\n"
                f"{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_run_kill9_resume_ctrl_c_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    log = tmp_path / "run.log"
    per_target = 2
    proc = start_cli(["run", str(TINY_LLAMA), "--device", "cpu", "--top", "2", "--agent",
                      "tuner", "--max-experiments-per-target", str(per_target), "--out",
                      str(run_dir), "--no-live", "--bench-timeout", "120"], log)
    killed_at = wait_for_in_flight(proc, run_dir / "state.json", min_experiment=2, log=log)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    # Right after the kill: the journal holds the experiment, results.tsv does not.
    state, rows = assert_consistent(run_dir)
    assert state.in_flight is not None and state.in_flight.experiment == killed_at
    assert len(rows) == killed_at

    proc = start_cli(["resume", str(run_dir), "--no-live"], log)
    stopped_at = wait_for_in_flight(proc, run_dir / "state.json", min_experiment=killed_at + 2,
                                    log=log)
    proc.send_signal(signal.SIGINT)  # Ctrl-C: finish this experiment, save, exit
    assert proc.wait(timeout=240) == 130, log.read_text()[-3000:]
    state, rows = assert_consistent(run_dir)
    assert state.in_flight is None and len(rows) == stopped_at + 1
    assert not state.finished

    proc = start_cli(["resume", str(run_dir), "--no-live"], log)
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    state, rows = assert_consistent(run_dir)
    output = log.read_text()

    assert state.finished and state.in_flight is None and state.sessions == 3
    assert len(rows) == 2 * (per_target + 1)  # two baselines, two experiments each
    assert [r["status"] for r in rows].count("baseline") == 2
    assert sum(r["description"] == rows[killed_at]["description"] for r in rows) == 1
    for target in state.targets:
        assert target.status == "done" and target.stop_rule == "experiments"
        assert target.experiments == per_target
        if target.best is not None:
            assert (run_dir / "kernels" / f"{target.tag}.py").is_file()
    assert git(run_dir, "log", "-1", "--format=%s").startswith(f"finish {state.targets[1].tag}")
    assert "timings are host-clock" in output and "resuming experiment" in output
    assert output.count("autokernel resume") == 1  # the Ctrl-C session's one resume hint
    plan = json.loads((run_dir / "plan.json").read_text())
    assert [t.kernel_type for t in state.targets] == [t["kernel_type"] for t in plan["targets"][:2]]


# ---------------------------------------------------------------------------------------------


class CrashHangThenTune:
    """Proposes a kernel that raises, then one that never returns, then hands over to the tuner."""

    name = "crash-hang-tuner"

    def __init__(self) -> None:
        self.tuner = TunerAgent(seed=0)
        self.proposed = 0

    def propose(self, context: AgentContext) -> Proposal | None:
        self.proposed += 1
        # A later module-level definition replaces the starter's kernel_fn, as at import time.
        if self.proposed == 1:
            body = '    raise RuntimeError("this candidate always fails")\n'
            return Proposal(source=f"{context.best_source}\n\ndef kernel_fn(x, weight, eps=1e-6):"
                                   f"\n{body}", description="a kernel that raises")
        if self.proposed == 2:
            body = ("    spins = 0\n    while spins >= 0:  # never ends\n        spins += 1\n"
                    "    return x\n")
            return Proposal(source=f"{context.best_source}\n\ndef kernel_fn(x, weight, eps=1e-6):"
                                   f"\n{body}", description="a kernel that never returns")
        return self.tuner.propose(context)

    def observe(self, proposal: Proposal, result: BenchResult, kept: bool) -> None:
        return None


@pytest.mark.slow
def test_crashing_and_hanging_candidates_do_not_stop_the_run(tmp_path: Path) -> None:
    target = Target(rank=1, kernel_type="rmsnorm", shapes=[[32, 64]], dtype="fp32", calls=5,
                    time_ms=1.0, share=0.5, bench_shape=[32, 64], amdahl_2x=1.3,
                    cumulative_2x=1.3, params={"eps": 1e-5},
                    call_sites=[CallSite("norm", "aten::mul", [32, 64], "fp32", 5, 1.0)])
    plan = Plan(model="tiny.py", class_name="Model", device="cpu", dtype="fp32", gpu=None,
                total_ms=2.0, targets=[target])
    model = tmp_path / "tiny.py"
    model.write_text("# model\n")
    ws = Workspace.create(tmp_path / "run", run_tag="t", run_info={}, plan_json="{}\n",
                          model_path=model, program_md="# playbook\n",
                          reference_source="# oracles\n")
    state = RunState(run_tag="t", branch=BRANCH_PREFIX + "t", head=ws.head(), hours=None,
                     targets=[TargetState(index=0, rank=1, kernel_type="rmsnorm",
                                          tag="01_rmsnorm")])
    ResultsLog.create(ws.results_path)
    config = LoopConfig(device="cpu", dtype="fp32", agent="tuner", hours=None,
                        move_on=MoveOnConfig(max_experiments=3, target_speedup=None),
                        # the hang is waited for this long: 3x a quick rmsnorm experiment on a busy
                        # 2-core CI machine (5-8 s idle)
                        bench_timeout_s=25.0, harness_quick=True, revisit=False)
    messages: list[str] = []

    class Capture(PlainDashboard):
        def _print(self, text: str) -> None:
            messages.append(text)

    reason = Runner(ws, plan, state, config, CrashHangThenTune(), dashboard=Capture()).run()
    assert reason == "every target is done"
    rows = read_rows(ws.results_path)
    assert [r["status"] for r in rows[:3]] == ["baseline", "crash", "timeout"]
    assert rows[0]["correctness"] == "PASS"
    assert "this candidate always fails" in rows[1]["reason"]
    assert rows[2]["correctness"] == "TIMEOUT" and rows[2]["commit"] == ""
    assert rows[3]["status"] in ("keep", "revert") and rows[3]["agent"] == "tuner"
    assert rows[3]["correctness"] == "PASS"
    kernel = ws.read_kernel()
    assert "never ends" not in kernel and "always fails" not in kernel
    assert state.targets[0].stop_rule == "experiments"
    assert any("exp 2 01_rmsnorm TIMEOUT" in m for m in messages)
    assert git(ws.root, "rev-parse", "HEAD") == state.head
    assert git(ws.root, "status", "--porcelain") == ""


def test_run_refuses_bad_input_with_one_line(tmp_path: Path) -> None:
    def cli(*args: str) -> Any:
        return subprocess.run([sys.executable, "-m", "autokernel", *args], cwd=ROOT,
                              capture_output=True, text=True,
                              env=dict(os.environ, TRITON_INTERPRET="1"))

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "file").write_text("x")
    for args, words in [
        (["run", str(tmp_path / "missing.py"), "--device", "cpu"], "model file not found"),
        (["run", str(TINY_LLAMA), "--device", "cpu", "--out", str(busy)], "not empty"),
        (["run", str(TINY_LLAMA), "--device", "cpu", "--top", "0"], "--top"),
        (["run", str(TINY_LLAMA), "--device", "cpu", "--only", "conv"], "unknown kernel type"),
        (["run", str(TINY_LLAMA), "--device", "cpu", "--peak-fraction", "2"], "--peak-fraction"),
        (["resume", str(tmp_path)], "not an autokernel run"),
    ]:
        result = cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert words in result.stderr and "Traceback" not in result.stderr
