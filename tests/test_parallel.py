"""The multi-GPU loop's logic (autokernel.parallel) with workers in this process and a scripted
harness: fast, no interpreter. The real workers, harness and CLI are in test_parallel_cpu.py.

- `--gpus` parsing, worker slots, their environment (NVLink multicast off), mixed GPU models;
- two workers: targets in parallel, a target's candidates side by side, a candidate kept
  against a best that its sibling replaced is judged again; results.tsv's gpu column;
- a lost worker's experiment is judged again, one lost twice is a crash;
- one worker makes the same decisions as the one-GPU loop (`--gpus 1` against today's path).
"""

from __future__ import annotations

import subprocess
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autokernel.agents.tuner import TunerAgent
from autokernel.harness.result import BenchResult
from autokernel.kernels import starter_path
from autokernel.loop.config import LoopConfig
from autokernel.loop.dashboard import PlainDashboard
from autokernel.loop.results import COLUMNS, RIGHTNOW_COLUMNS, ResultsLog, read_rows
from autokernel.loop.runner import Runner
from autokernel.loop.state import RunState, TargetState
from autokernel.loop.workspace import BRANCH_PREFIX, Workspace
from autokernel.orchestrate import MoveOnConfig
from autokernel.parallel.agents import TargetAgents
from autokernel.parallel.board import read_board
from autokernel.parallel.scheduler import ParallelError, ParallelRunner
from autokernel.parallel.slots import (GpuSpecError, NVLINK_MULTICAST_OFF, local_slots, one_model,
                                       parse_gpus)
from autokernel.parallel.worker import JudgeJob, JudgeOutcome, JudgeWorker, WorkerIdentity
from autokernel.profiling.plan import CallSite, Plan, Target
from bench_results import passing_result

SHAPE = [32, 64]
STARTERS = {starter_path(t).read_text(encoding="utf-8") for t in ("rmsnorm", "softmax")}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


# -- --gpus ------------------------------------------------------------------------------------

def test_gpus_spec_slots_and_worker_environment() -> None:
    assert parse_gpus("all") == "all" and parse_gpus("4") == 4 and parse_gpus("0,2,3") == [0, 2, 3]
    for bad in ("0", "-1", "two", "1,-1", "0,x"):
        with pytest.raises(GpuSpecError):
            parse_gpus(bad)
    assert [s.label for s in local_slots("2", "cpu")] == ["cpu0", "cpu1"]
    assert len(local_slots("all", "cpu", cpu_count=3)) == 3
    gpus = ["0", "1", "2", "3"]  # what torch sees on a 4-GPU machine
    slots = local_slots("0,2,3", "cuda", gpus=gpus)
    assert [(s.label, s.visible) for s in slots] == [("0", "0"), ("2", "2"), ("3", "3")]
    # Within the head's own CUDA_VISIBLE_DEVICES=4,5: --gpus 1 is its second GPU, physical 5.
    assert local_slots("1,0", "cuda", gpus=["4", "5"])[0].visible == "5"
    assert len(local_slots("all", "cuda", gpus=gpus)) == 4
    # A GPU named twice: two workers sharing it (a one-GPU machine exercises every path).
    assert [(s.label, s.visible) for s in local_slots("0,0", "cuda", gpus=gpus)] == [
        ("0", "0"), ("0.1", "0")]
    assert [s.label for s in local_slots("1,1", "cpu")] == ["cpu1", "cpu1.1"]
    with pytest.raises(GpuSpecError, match="has 4 GPUs"):
        local_slots("8", "cuda", gpus=gpus)
    with pytest.raises(GpuSpecError, match="no GPU 7"):
        local_slots("0,7", "cuda", gpus=gpus)
    env = slots[1].env()
    assert env["CUDA_VISIBLE_DEVICES"] == "2"
    assert {k: env[k] for k in NVLINK_MULTICAST_OFF} == {
        "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1"}
    assert one_model({"0": "NVIDIA H200", "1": "NVIDIA H200"}) is None
    refusal = one_model({"0": "NVIDIA H100", "1": "NVIDIA H200", "2": "NVIDIA H200"})
    assert refusal is not None and "\n" not in refusal
    assert "NVIDIA H100: 0" in refusal and "NVIDIA H200: 1, 2" in refusal


def test_the_harness_keeps_multicast_off_in_candidate_processes(tmp_path: Path,
                                                                monkeypatch: Any) -> None:
    from autokernel.harness.spawn import candidate_env

    for name, value in NVLINK_MULTICAST_OFF.items():
        monkeypatch.setenv(name, value)
    env = candidate_env("cpu", tmp_path, tmp_path / "cache")
    assert {k: env.get(k) for k in NVLINK_MULTICAST_OFF} == NVLINK_MULTICAST_OFF


def test_gpu_column_comes_after_the_fixed_ones() -> None:
    assert COLUMNS[-1] == "gpu" and RIGHTNOW_COLUMNS == (
        "experiment", "tag", "kernel_type", "throughput_tflops", "latency_us", "pct_peak",
        "speedup_vs_pytorch", "correctness", "peak_vram_mb", "description")


# -- the loop, with workers in this process ------------------------------------------------------

def scripted_bench(kernel_path: Path, *, incumbent: Path | None, **options: Any) -> BenchResult:
    """The starter runs in 100 us, every other kernel in 80; timed paired with the incumbent."""
    def latency(source: str) -> float:
        return 100.0 if source in STARTERS else 80.0

    source = Path(kernel_path).read_text(encoding="utf-8")
    mine = latency(source)
    paired: dict[str, Any] = {}
    if incumbent is not None:
        theirs = latency(Path(incumbent).read_text(encoding="utf-8"))
        paired = {"incumbent_us": theirs, "paired_ratios": [theirs / mine] * 20}
    kernel_type = "softmax" if "softmax" in source.split("KERNEL_TYPE", 1)[1][:30] else "rmsnorm"
    return passing_result(mine, shape=SHAPE, kernel_type=kernel_type, device="cpu",
                          shapes=[SHAPE], **paired)


class LostWorker(RuntimeError):
    pass


class InProcessPool:
    """Workers in this process: each job is judged when it is submitted. `lose`: job number ->
    how many times its worker dies while judging it; `lose_idle`: job numbers whose worker is
    found dead when the job is submitted (it died while idle), once each."""

    kind = "test"

    def __init__(self, root: Path, labels: list[str], lose: dict[int, int] | None = None,
                 names: list[str] | None = None, bench: Any = scripted_bench,
                 lose_idle: set[int] | None = None) -> None:
        # Their compile caches shared, as the workers of a machine share them.
        self.workers = [JudgeWorker(label, root / label, "cpu", bench=bench,
                                    harness_cache=root / "harness") for label in labels]
        self.lose = dict(lose or {})
        self.lose_idle = set(lose_idle or ())
        self.names = names
        self.restarts: list[int] = []
        self.judged: list[str] = []  # the label of the worker of each job, in order
        self.closed = False

    def start(self) -> list[WorkerIdentity]:
        identities = [w.hello() for w in self.workers]
        if self.names:
            identities = [replace(i, device_name=n) for i, n in zip(identities, self.names)]
        return identities

    def submit(self, index: int, job: JudgeJob) -> Future[JudgeOutcome]:
        if job.number in self.lose_idle:
            self.lose_idle.discard(job.number)
            raise LostWorker(f"worker {index} died while idle")
        future: Future[JudgeOutcome] = Future()
        if self.lose.get(job.number, 0) > 0:
            self.lose[job.number] -= 1
            future.set_exception(LostWorker(f"worker {index} was killed"))
        else:
            future.set_result(self.workers[index].judge(job))
            self.judged.append(self.workers[index].label)
        return future

    def is_lost(self, error: BaseException) -> bool:
        return isinstance(error, LostWorker)

    def restart(self, index: int) -> Future[WorkerIdentity]:
        self.restarts.append(index)
        future: Future[WorkerIdentity] = Future()
        future.set_result(self.workers[index].hello())
        return future

    def close(self, *, abandon: bool = False) -> None:
        self.closed = True


def make_run(root: Path, kernel_types: list[str], max_experiments: int) -> tuple[
        Workspace, Plan, RunState, LoopConfig]:
    targets = [Target(rank=i + 1, kernel_type=t, shapes=[SHAPE], dtype="fp32", calls=5,
                      time_ms=1.0, share=0.5, bench_shape=SHAPE, amdahl_2x=1.3,
                      cumulative_2x=1.3, params={"eps": 1e-5} if t == "rmsnorm" else {},
                      call_sites=[CallSite("x", "aten::mul", SHAPE, "fp32", 5, 1.0)])
               for i, t in enumerate(kernel_types)]
    plan = Plan(model="m.py", class_name="Model", device="cpu", dtype="fp32", gpu=None,
                total_ms=2.0, targets=targets)
    root.mkdir(parents=True)
    model = root / "m.py"
    model.write_text("# model\n")
    ws = Workspace.create(root / "run", run_tag="t", run_info={}, plan_json="{}\n",
                          model_path=model, program_md="# playbook\n",
                          reference_source="# oracles\n")
    state = RunState(run_tag="t", branch=BRANCH_PREFIX + "t", head=ws.head(), hours=None,
                     targets=[TargetState(index=i, rank=i + 1, kernel_type=t,
                                          tag=f"{i + 1:02d}_{t}")
                              for i, t in enumerate(kernel_types)])
    ResultsLog.create(ws.results_path)
    config = LoopConfig(device="cpu", dtype="fp32", agent="tuner", hours=None,
                        move_on=MoveOnConfig(max_experiments=max_experiments,
                                             target_speedup=None, max_consecutive_reverts=None),
                        harness_quick=True, revisit=False, gpus="2")
    return ws, plan, state, config


class Capture(PlainDashboard):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def _print(self, text: str) -> None:
        self.lines.append(text)


def test_two_workers_run_targets_in_parallel_and_rejudge_a_stale_keep(tmp_path: Path) -> None:
    ws, plan, state, config = make_run(tmp_path / "a", ["rmsnorm", "softmax"], 3)
    pool = InProcessPool(tmp_path / "workers", ["cpu0", "cpu1"])
    dashboard = Capture()
    runner = ParallelRunner(ws, plan, state, config, TargetAgents(TunerAgent(seed=0)), pool,
                            dashboard=dashboard)
    assert runner.run() == "every target is done" and pool.closed
    rows = read_rows(ws.results_path)
    assert [int(r["experiment"]) for r in rows] == list(range(8))
    # Two targets at once: both baselines first, each on its own worker.
    assert [(r["tag"], r["status"], r["gpu"]) for r in rows[:2]] == [
        ("01_rmsnorm", "baseline", "cpu0"), ("02_softmax", "baseline", "cpu1")]
    assert {r["gpu"] for r in rows} == {"cpu0", "cpu1"}
    for tag in ("01_rmsnorm", "02_softmax"):
        mine = [r for r in rows if r["tag"] == tag]
        # One keep (the first candidate faster than the starter); the others, judged against
        # it in the same rounds, are reverted at 1.00x.
        assert [r["status"] for r in mine] == ["baseline", "keep", "revert", "revert"]
        assert all(abs(float(r["vs_best"]) - 1.0) < 1e-9 for r in mine[2:])
        assert len({r["description"] for r in mine}) == 4  # no configuration judged twice
    assert git(ws.root, "rev-parse", "HEAD") == state.head
    assert git(ws.root, "status", "--porcelain") == ""
    committed = [line.split(" ", 2)[1] for line in
                 git(ws.root, "log", "--format=%s", "--reverse").splitlines()
                 if line.startswith("exp ")]
    assert committed == [r["experiment"] for r in rows if r["status"] in ("baseline", "keep")]
    for target in state.targets:
        assert target.status == "done" and target.best is not None
        assert target.best.gpu in ("cpu0", "cpu1")
        best = git(ws.root, "show", f"{target.best_commit}:kernel.py") + "\n"
        assert (ws.root / "kernels" / f"{target.tag}.py").read_text() == best
    board = read_board(ws.cache_dir / "gpus.json")
    assert sum(w.experiments for w in board.values()) == 8
    assert any(line.startswith("worker cpu1: idle; ") for line in dashboard.lines)


def test_one_target_on_two_workers_judges_candidates_side_by_side(tmp_path: Path) -> None:
    ws, plan, state, config = make_run(tmp_path / "a", ["rmsnorm"], 3)
    pool = InProcessPool(tmp_path / "workers", ["cpu0", "cpu1"])
    dashboard = Capture()
    ParallelRunner(ws, plan, state, config, TargetAgents(TunerAgent(seed=0)), pool,
                   dashboard=dashboard).run()
    rows = read_rows(ws.results_path)
    # The baseline alone; then two candidates at once, both faster than the starter: the one
    # recorded first is kept, the other was judged against the starter, so it is judged again
    # against the new best (and reverted at 1.00x) rather than recorded as a keep.
    assert [r["status"] for r in rows] == ["baseline", "keep", "revert", "revert"]
    assert pool.judged[:3] == ["cpu0", "cpu0", "cpu1"] and len(pool.judged) == 5
    assert any("judged again against the new one" in line for line in dashboard.lines)


def test_a_lost_workers_experiment_is_judged_again_and_twice_lost_is_a_crash(
        tmp_path: Path) -> None:
    ws, plan, state, config = make_run(tmp_path / "a", ["rmsnorm", "softmax"], 1)
    # Jobs 1 and 2 are the baselines; job 3 is lost once, job 4 twice.
    pool = InProcessPool(tmp_path / "workers", ["cpu0", "cpu1"], lose={3: 1, 4: 2})
    runner = ParallelRunner(ws, plan, state, config, TargetAgents(TunerAgent(seed=0)), pool,
                            dashboard=Capture())
    assert runner.run() == "every target is done"
    rows = read_rows(ws.results_path)
    assert [int(r["experiment"]) for r in rows] == [0, 1, 2, 3]
    statuses = sorted((r["tag"], r["status"]) for r in rows if r["status"] != "baseline")
    assert statuses == [("01_rmsnorm", "keep"), ("02_softmax", "crash")]
    crash = next(r for r in rows if r["status"] == "crash")
    assert "lost 2 times" in crash["reason"]
    assert len(pool.restarts) == 3  # a restart per loss, of whichever worker judged it
    assert sum(w.lost for w in read_board(ws.cache_dir / "gpus.json").values()) == 3


def test_a_worker_found_dead_when_a_job_is_handed_to_it_restarts_and_the_job_waits(
        tmp_path: Path) -> None:
    """A worker that died while idle fails the submit itself (concurrent.futures raises
    BrokenProcessPool there): the run goes on, the worker restarts, and the job (which never
    ran) is judged once, as if nothing happened."""
    ws, plan, state, config = make_run(tmp_path / "a", ["rmsnorm", "softmax"], 1)
    pool = InProcessPool(tmp_path / "workers", ["cpu0", "cpu1"], lose_idle={3})
    dashboard = Capture()
    runner = ParallelRunner(ws, plan, state, config, TargetAgents(TunerAgent(seed=0)), pool,
                            dashboard=dashboard)
    assert runner.run() == "every target is done"
    rows = read_rows(ws.results_path)
    assert [int(r["experiment"]) for r in rows] == [0, 1, 2, 3]
    assert not [r for r in rows if r["status"] == "crash"]
    assert len(pool.restarts) == 1 and len(pool.judged) == 4
    assert any("was lost while idle" in line for line in dashboard.lines)


def test_gpus_of_different_models_are_refused(tmp_path: Path) -> None:
    ws, plan, state, config = make_run(tmp_path / "a", ["rmsnorm"], 1)
    pool = InProcessPool(tmp_path / "workers", ["0", "1"], names=["NVIDIA H100", "NVIDIA H200"])
    with pytest.raises(ParallelError, match="mixes GPU models"):
        ParallelRunner(ws, plan, state, config, TargetAgents(TunerAgent(seed=0)), pool,
                       dashboard=Capture()).run()
    assert read_rows(ws.results_path) == [] and pool.closed


def test_one_worker_decides_as_the_one_gpu_loop(tmp_path: Path) -> None:
    """--gpus 1 and today's loop, same agent, same verdicts: the same experiments, in the same
    order, with the same decisions."""
    def decisions(ws: Workspace) -> list[tuple[str, ...]]:
        return [(r["experiment"], r["tag"], r["description"], r["status"], r["vs_best"])
                for r in read_rows(ws.results_path)]

    ws, plan, state, config = make_run(tmp_path / "serial", ["rmsnorm", "softmax"], 4)
    Runner(ws, plan, state, replace(config, gpus=None), TunerAgent(seed=0),
           bench=scripted_bench, dashboard=Capture()).run()
    serial = decisions(ws)
    ws, plan, state, config = make_run(tmp_path / "one", ["rmsnorm", "softmax"], 4)
    ParallelRunner(ws, plan, state, replace(config, gpus="1"), TargetAgents(TunerAgent(seed=0)),
                   InProcessPool(tmp_path / "workers", ["cpu0"]), dashboard=Capture()).run()
    assert decisions(ws) == serial and len(serial) == 10
    assert {r["gpu"] for r in read_rows(ws.results_path)} == {"cpu0"}


def test_claude_drafts_of_a_round_are_judged_side_by_side(tmp_path: Path) -> None:
    from test_frontier import CorpusModel, claude
    from test_workspace import STARTERS as FAKE_STARTERS
    from test_workspace import FakeBench, loop_config, make_plan, new_run

    ws, state, plan = new_run(tmp_path / "a", make_plan(("softmax",)))
    bench = FakeBench()
    model = CorpusModel(bench)
    agent = claude(model, drafts=2, explore=0.0)
    config = replace(loop_config(max_consecutive_reverts=None, max_experiments=4), gpus="2")
    pool = InProcessPool(tmp_path / "workers", ["cpu0", "cpu1"], bench=bench)
    ParallelRunner(ws, plan, state, config, TargetAgents(agent), pool, dashboard=Capture(),
                   starter_source=FAKE_STARTERS.__getitem__).run()
    rows = read_rows(ws.results_path)
    assert [int(r["experiment"]) for r in rows] == list(range(5))
    assert all(r["agent"] == "claude" for r in rows[1:])
    # Both conversations of a round before any of its drafts is judged; then the two drafts
    # on the two workers at once.
    assert model.benched_before == [1, 1, 3, 3]
    assert pool.judged == ["cpu0", "cpu0", "cpu1", "cpu0", "cpu1"]


# -- kernelbench --gpus ---------------------------------------------------------------------------

def test_kernelbench_runs_a_problem_per_worker_at_once_each_pinned(tmp_path: Path) -> None:
    """Two problems, two workers: both start before either ends, each in a child whose
    environment has NVLink multicast off (the problems fail at once, saying so)."""
    from autokernel.kernelbench.on_gpus import run_suite_on_gpus
    from autokernel.kernelbench.problem import ProblemJob

    problems = sorted((Path(__file__).parent / "fixtures" / "kernelbench_env").glob("*.py"))
    template = ProblemJob(problem="", workspace="", result_path="", device="cpu", dtype="fp32",
                          minutes=0.1, agent="tuner")
    events: list[tuple[str, int]] = []
    records = run_suite_on_gpus(problems, tmp_path, template, local_slots("2", "cpu"),
                                lambda i, record, so_far: events.append(("end", i)),
                                lambda i, path: events.append(("start", i)))
    assert sorted(events[:2]) == [("start", 0), ("start", 1)]
    assert [r["problem"] for r in records] == ["env_a", "env_b"]
    assert sorted(r["worker"] for r in records) == ["cpu0", "cpu1"]
    for record in records:
        assert record["status"] == "error"
        assert "NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1" in record["reason"]
        assert (tmp_path / "logs" / f"{record['problem']}.json").is_file()


def test_gpus_is_refused_in_one_line_before_anything_runs(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autokernel.cli import app

    model = Path(__file__).parent / "fixtures" / "models" / "two_cheap_targets.py"
    for args in (["run", str(model), "--device", "cpu", "--gpus", "0"],
                 ["kernelbench", str(model), "--device", "cpu", "--gpus", "one",
                  "--out", str(tmp_path / "kb")],
                 ["resume", str(tmp_path), "--gpus", "-1"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "--gpus" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "kb").exists()
