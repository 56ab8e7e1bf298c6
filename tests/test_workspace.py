"""The workspace repository and the loop's bookkeeping, with a synthetic harness.

The harness here computes a latency from the kernel file's tunables instead of running it, so
hundreds of experiments take seconds; every git operation, results.tsv row, journal phase and
repair is the real one. `test_loop_cpu.py` runs the same loop with the real harness.
"""

from __future__ import annotations

import inspect
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from bench_results import passing_result

from autokernel.agents.base import AgentContext, AgentStop, Proposal
from autokernel.agents.tuner import TunerAgent
from autokernel.harness.result import BenchResult, ShapeTiming, Status
from autokernel.kernelfile import parse_kernel_source, set_tunables
from autokernel.loop.dashboard import PlainDashboard
from autokernel.loop.keep_figure import decision_text
from autokernel.loop.results import COLUMNS, RIGHTNOW_COLUMNS, ResultsLog, read_rows
from autokernel.loop.config import LoopConfig
from autokernel.loop.journal import RunInconsistent
from autokernel.loop.judge import BENCH_OPTIONS, BenchInterfaceError
from autokernel.loop.measure import measure, shape_weights
from autokernel.loop.runner import Runner
from autokernel.loop.state import RunState, TargetState
from autokernel.loop.workspace import (
    BRANCH_PREFIX,
    Workspace,
    WorkspaceError,
    check_new_workspace_dir,
)
from autokernel.orchestrate import MoveOnConfig
from autokernel.profiling.plan import CallSite, Plan, Target

SOFTMAX = '''"""A synthetic softmax kernel file: the fake harness times it from its tunables."""
KERNEL_TYPE = "softmax"
BACKEND = "triton"

BLOCK_N = 256
NUM_WARPS = 4
VARIANT = "one_pass"
TUNABLE_SPACE = {"BLOCK_N": [64, 128, 256, 512, 1024], "NUM_WARPS": [1, 2, 4, 8],
                 "VARIANT": ["one_pass", "two_pass"]}


def kernel_fn(x):
    return x.softmax(-1)
'''
RMSNORM = SOFTMAX.replace('"softmax"', '"rmsnorm"').replace("def kernel_fn(x)",
                                                             "def kernel_fn(x, w, eps=1e-6)")
STARTERS = {"softmax": SOFTMAX, "rmsnorm": RMSNORM}


def fake_latency(tunables: dict[str, Any]) -> float | None:
    """Best at BLOCK_N=1024, NUM_WARPS=8, one_pass; two_pass with 1 warp crashes."""
    if tunables.get("VARIANT") == "two_pass" and tunables.get("NUM_WARPS") == 1:
        return None
    block = [64, 128, 256, 512, 1024].index(tunables["BLOCK_N"])
    warps = [1, 2, 4, 8].index(tunables["NUM_WARPS"])
    return 10.0 + 3 * (4 - block) + 2 * (3 - warps) + (4 if tunables["VARIANT"] == "two_pass"
                                                          else 0)


class FakeBench:
    """Times a kernel file from its tunables; records what it was asked."""

    def __init__(self, iqr: float = 0.05, eager: float = 40.0, compile_: float = 25.0) -> None:
        self.calls: list[dict[str, Any]] = []
        self.iqr, self.eager, self.compile = iqr, eager, compile_
        self.before_return: Any = None  # hook: called with the result before it is returned

    def __call__(self, kernel_path: Path, *, device: str, shapes: list[list[int]],
                 dtypes: list[str], correctness_dtypes: list[str] | None,
                 model_shapes: list[list[int]], params: dict[str, Any], timeout_s: float,
                 cache_dir: Path, quick: bool, timing_budget_s: float, incumbent: Path | None,
                 min_gain: float) -> BenchResult:
        """The loop's bench interface (`autokernel.loop.judge.Bench`), every option explicit."""
        source = Path(kernel_path).read_text()
        self.calls.append({"shapes": shapes, "dtypes": dtypes, "cache_dir": cache_dir,
                           "source": source, "quick": quick, "incumbent": incumbent})
        result = self.judge(source, device, shapes, dtypes, quick=quick, incumbent=incumbent)
        if self.before_return is not None:
            self.before_return(result)
        return result

    def judge(self, source: str, device: str, shapes: list[list[int]], dtypes: list[str], *,
              quick: bool, incumbent: Path | None) -> BenchResult:
        if "HANG" in source:
            result = BenchResult(status=Status.TIMEOUT, stage="run", reason="timed out after 1 s")
        elif "RAISE" in source:
            result = BenchResult(status=Status.CRASH, stage="smoke", reason="RuntimeError: boom")
        elif "WRONG" in source:
            result = BenchResult(status=Status.FAIL, stage="correctness",
                                 reason="max abs error 3.2 at shape 64x128")
        else:
            latency = fake_latency(parse_kernel_source(source).tunables)
            if latency is None:
                result = BenchResult(status=Status.CRASH, stage="smoke",
                                     reason="out of resources")
            else:
                result = self.passing(latency, device, shapes, dtypes)
        return result

    def passing(self, latency: float, device: str, shapes: list[list[int]],
                dtypes: list[str]) -> BenchResult:
        """A PASS at `latency` µs on the first shape (each further shape takes longer)."""
        timings = [ShapeTiming(shape=s, dtype=dtypes[0], latency_us=latency * (i + 1),
                               iqr_us=self.iqr, eager_us=self.eager * (i + 1),
                               compile_us=self.compile * (i + 1),
                               speedup_vs_eager=self.eager / latency,
                               speedup_vs_compile=self.compile / latency, pct_peak_datasheet=20.0)
                   for i, s in enumerate(shapes)]
        return BenchResult(status=Status.PASS, device=device, shapes=shapes, dtypes=dtypes,
                           harness_seconds=0.01, timing_meaningful=device != "cpu",
                           timings=timings)


def make_plan(types: tuple[str, ...] = ("softmax", "rmsnorm")) -> Plan:
    targets = []
    for rank, kernel_type in enumerate(types, start=1):
        targets.append(Target(
            rank=rank, kernel_type=kernel_type, shapes=[[64, 128], [32, 128]], dtype="fp32",
            calls=3, time_ms=1.0, share=0.3, bench_shape=[64, 128], amdahl_2x=1.2,
            cumulative_2x=1.3,
            call_sites=[CallSite("a", "aten::x", [64, 128], "fp32", 2, 0.75),
                        CallSite("b", "aten::x", [32, 128], "fp32", 1, 0.25)],
        ))
    return Plan(model="m.py", class_name="Model", device="cpu", dtype="fp32", gpu=None,
                total_ms=3.0, targets=targets)


def new_run(tmp_path: Path, plan: Plan | None = None, chosen: list[int] | None = None,
            **config: Any) -> tuple[Workspace, RunState, Plan]:
    plan = plan or make_plan()
    tmp_path.mkdir(parents=True, exist_ok=True)
    model = tmp_path / "model.py"
    model.write_text("# a model\n")
    ws = Workspace.create(tmp_path / "run", run_tag="m-1", run_info={"config": {}},
                          plan_json=json.dumps(plan.to_dict()), model_path=model,
                          program_md="# playbook\n", reference_source="# oracles\n")
    targets = [TargetState(index=i, rank=t.rank, kernel_type=t.kernel_type,
                           tag=f"{t.rank:02d}_{t.kernel_type}") for i, t in enumerate(plan.targets)
               if chosen is None or i in chosen]
    state = RunState(run_tag="m-1", branch=BRANCH_PREFIX + "m-1", head=ws.head(),
                     targets=targets, hours=config.pop("hours", None))
    ResultsLog.create(ws.results_path)
    state.save(ws.state_path)
    return ws, state, plan


def loop_config(screen: bool = False, **move_on: Any) -> LoopConfig:
    """The loop as the tests drive it; screening (quick sweep, then the full one for a keep) is
    off unless asked for, since FakeBench has no quick sweep and would just be asked twice."""
    defaults = dict(max_consecutive_reverts=6, peak_fraction=None, target_seconds=None,
                    target_speedup=None, max_experiments=None)
    defaults.update(move_on)
    return LoopConfig(device="cpu", dtype="fp32", agent="tuner", hours=None,
                      move_on=MoveOnConfig(**defaults), revisit=False, screen=screen)


def runner_for(ws: Workspace, state: RunState, plan: Plan, agent: Any, bench: FakeBench,
               config: LoopConfig | None = None) -> Runner:
    return Runner(ws, plan, state, config or loop_config(), agent, bench=bench,
                  dashboard=PlainDashboard(stream=open(os.devnull, "w")),
                  starter_source=STARTERS.__getitem__)


def git(ws: Workspace, *args: str) -> str:
    return subprocess.run(["git", "-C", str(ws.root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def assert_consistent(ws: Workspace, state: RunState) -> list[dict[str, str]]:
    """The invariants of a run at rest."""
    rows = read_rows(ws.results_path)
    assert [int(r["experiment"]) for r in rows] == list(range(state.next_experiment))
    subjects = dict(line.split(" ", 1) for line in git(ws, "log", "--format=%H %s").splitlines())
    committed = [r for r in rows if r["status"] in ("keep", "baseline")]
    for row in committed:
        assert row["commit"] in subjects, row
        assert subjects[row["commit"]].startswith(f"exp {row['experiment']} {row['tag']}: ")
    exp_commits = [s for s in subjects.values() if s.startswith("exp ")]
    assert len(exp_commits) == len(committed)  # no commit without its keep/baseline row
    assert git(ws, "rev-parse", "HEAD") == state.head
    assert git(ws, "status", "--porcelain") == ""  # kernel.py is HEAD's, nothing stray
    assert state.in_flight is None
    return rows


# ---------------------------------------------------------------------------------------------
# Workspace


def test_workspace_is_its_own_repo_on_an_autokernel_branch(tmp_path: Path) -> None:
    ws, state, _ = new_run(tmp_path)
    assert (ws.root / ".git").is_dir()
    assert git(ws, "rev-parse", "--show-toplevel") == str(ws.root)
    assert ws.branch() == "autokernel/m-1"
    assert git(ws, "config", "--local", "user.name") == "autokernel"
    assert git(ws, "log", "-1", "--format=%an <%ae>") == "autokernel <autokernel@localhost>"
    assert not os.access(ws.reference_path, os.W_OK) or os.geteuid() == 0
    assert stat.S_IMODE(ws.reference_path.stat().st_mode) == 0o444
    tracked = set(git(ws, "ls-files").splitlines())
    assert {"program.md", "reference.py", "plan.json", "run.json", "model/model.py"} <= tracked
    assert "results.tsv" not in tracked and "state.json" not in tracked
    assert git(ws, "check-ignore", "results.tsv", "state.json", ".cache/x") != ""


def test_a_new_run_refuses_a_non_empty_dir_and_other_peoples_repos(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("")
    with pytest.raises(WorkspaceError, match="not empty"):
        check_new_workspace_dir(busy)
    user_repo = tmp_path / "project"
    user_repo.mkdir()
    subprocess.run(["git", "init", "-q", str(user_repo)], check=True)
    with pytest.raises(WorkspaceError, match="does not ignore it"):
        check_new_workspace_dir(user_repo / "runs" / "r1")
    (user_repo / ".gitignore").write_text("runs/\n")
    check_new_workspace_dir(user_repo / "runs" / "r1")  # ignored there: fine
    ws, _, _ = new_run(tmp_path)
    with pytest.raises(WorkspaceError, match="inside the autokernel run"):
        check_new_workspace_dir(ws.root / "nested")


def test_open_ignores_paths_an_older_workspace_did_not(tmp_path: Path) -> None:
    ws, _, _ = new_run(tmp_path)
    (ws.root / ".gitignore").write_text("results.tsv\nstate.json\n.cache/\n")  # as made before
    git(ws, "commit", "-qam", "an older workspace")
    (ws.root / "verdicts").mkdir()
    (ws.root / "verdicts" / "0001.json").write_text("{}")
    Workspace.open(ws.root)
    ws.reset_to(ws.head())  # a revert: `git clean` must leave the verdicts alone
    assert (ws.root / "verdicts" / "0001.json").is_file()
    assert git(ws, "status", "--porcelain") == ""


def test_open_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError):
        Workspace.open(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    (other / "run.json").write_text("{}")
    (other / "state.json").write_text("{}")
    with pytest.raises(WorkspaceError):  # a repository, but not on an autokernel/ branch
        Workspace.open(other)


# ---------------------------------------------------------------------------------------------
# The objective (the keep rule itself is tested in test_keep.py)


def test_a_bench_that_does_not_take_every_loop_option_is_refused_up_front(
        tmp_path: Path) -> None:
    from autokernel.harness.runner import run_bench
    from autokernel.loop.judge import check_bench

    ws, state, plan = new_run(tmp_path)

    def old_bench(kernel_path: Path, *, device: str, shapes: list[list[int]], dtypes: list[str],
                  timeout_s: float, cache_dir: Path) -> BenchResult:
        raise AssertionError("never called")

    with pytest.raises(BenchInterfaceError, match="unexpected keyword argument"):
        runner_for(ws, state, plan, TunerAgent(seed=0), old_bench)
    check_bench(run_bench)  # the harness takes every option the loop passes
    assert set(BENCH_OPTIONS) <= set(inspect.signature(run_bench).parameters)


def test_the_objective_weights_shapes_by_profiled_time() -> None:
    plan = make_plan()
    weights = shape_weights(plan.targets[0], [[64, 128], [32, 128]])
    assert weights == {(64, 128): 0.75, (32, 128): 0.25}
    result = BenchResult(status=Status.PASS, timings=[
        ShapeTiming([64, 128], "fp32", 10.0, 1.0, eager_us=30.0),
        ShapeTiming([32, 128], "fp32", 20.0, 2.0, eager_us=20.0)])
    m = measure(result, 1, "", weights)
    assert m.latency_us == pytest.approx(12.5) and m.iqr_us == pytest.approx(1.25)
    assert m.speedup_vs_eager == pytest.approx(27.5 / 12.5)
    assert m.primary_latency_us == 10.0
    one_shape = passing_result(10.0, shape=[64, 128], eager_us=30.0, speedup_vs_eager=3.0)
    single = measure(one_shape, 1, "", {(64, 128): 1.0})
    # One shape: the harness's ratio is the figure's one home; measure reads it, not a new one.
    assert single.speedup_vs_eager == one_shape.speedup_vs_eager == 3.0
    assert single.speedup_vs_compile is None and single.shapes == 1


# ---------------------------------------------------------------------------------------------
# The loop


def test_loop_commits_keeps_reverts_the_rest_and_results_survive(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path)
    bench = FakeBench()
    runner = runner_for(ws, state, plan, TunerAgent(seed=0), bench,
                        loop_config(max_experiments=12, max_consecutive_reverts=None))
    reason = runner.run()
    assert reason == "every target is done"
    rows = assert_consistent(ws, state)
    assert list(rows[0])[: len(RIGHTNOW_COLUMNS)] == list(RIGHTNOW_COLUMNS)
    assert list(rows[0]) == list(COLUMNS)
    statuses = [r["status"] for r in rows]
    assert statuses.count("baseline") == 2
    assert "keep" in statuses and "revert" in statuses
    for row in rows:  # the row's figures are the fake harness's
        if row["status"] in ("keep", "revert", "baseline"):
            tunables = json.loads(row["tunables"])
            assert float(row["latency_us"]) == fake_latency(tunables)
            assert float(row["speedup_vs_pytorch"]) == pytest.approx(40.0 / fake_latency(tunables),
                                                                     rel=1e-5)
    # Every keep is faster than everything kept before it on its target.
    for tag in ("01_softmax", "02_rmsnorm"):
        kept = [float(r["objective_us"]) for r in rows if r["tag"] == tag
                and r["status"] in ("baseline", "keep")]
        assert kept == sorted(kept, reverse=True) and len(set(kept)) == len(kept)
    # The finished targets' best kernels are committed under kernels/.
    for target in state.targets:
        assert target.status == "done" and target.stop_rule == "experiments"
        best_source = (ws.root / "kernels" / f"{target.tag}.py").read_text()
        assert parse_kernel_source(best_source).tunables == json.loads(
            next(r["tunables"] for r in rows if r["commit"] == target.best_commit))
    assert "kernels/02_rmsnorm.py" in git(ws, "ls-files")
    assert git(ws, "log", "-1", "--format=%s").startswith("finish 02_rmsnorm: ")
    assert "; best (exp " in git(ws, "log", "-1", "--format=%s")
    # The harness was asked for the target's profiled shapes and dtype, caching in .cache/.
    assert bench.calls[0]["shapes"] == [[64, 128], [32, 128]]
    assert bench.calls[0]["dtypes"] == ["fp32"]
    assert Path(bench.calls[0]["cache_dir"]).is_relative_to(ws.root / ".cache")
    # Each harness verdict is kept whole beside its row, out of git.
    for row in rows:
        if row["correctness"] != "ERROR":
            verdict = json.loads((ws.root / "verdicts" / f"{int(row['experiment']):04d}.json")
                                 .read_text())
            assert verdict["status"] == row["correctness"]
    assert "verdicts" not in git(ws, "ls-files")


def test_commit_messages_say_what_was_tried_and_the_result(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    runner_for(ws, state, plan, TunerAgent(seed=1), FakeBench(),
               loop_config(max_experiments=10)).run()
    rows = read_rows(ws.results_path)
    keep = next(r for r in rows if r["status"] == "keep")
    message = git(ws, "log", "-1", "--format=%s", keep["commit"])
    assert message.startswith(f"exp {keep['experiment']} 01_softmax: tuner: ")
    # The keep rule's own figure (here its unpaired comparison), never a primary-shape latency.
    assert f"keep: {decision_text(keep)[:60]}" in message and "µs" not in message
    baseline = git(ws, "log", "-1", "--format=%s", rows[0]["commit"])
    assert baseline.startswith("exp 0 01_softmax: baseline")
    assert "µs at 64x128 (primary shape)" in baseline and "× eager" in baseline
    assert "× compile" in baseline


class ScriptedAgent:
    """Proposes the given edits of the best kernel in order, then reports exhaustion."""

    name = "scripted"

    def __init__(self, edits: list[Any]) -> None:
        self.edits = list(edits)
        self.observed: list[tuple[str, bool]] = []

    def propose(self, context: AgentContext) -> Proposal | None:
        if not self.edits:
            return None
        edit = self.edits.pop(0)
        if isinstance(edit, Exception):
            raise edit
        if isinstance(edit, Proposal):
            return edit
        if isinstance(edit, dict):
            return Proposal(source=set_tunables(context.best_source, edit),
                            description=f"set {edit}")
        return Proposal(source=context.best_source + f"\n# {edit}\n", description=edit)

    def observe(self, proposal: Proposal, result: BenchResult, kept: bool) -> None:
        self.observed.append((proposal.description, kept))


def test_failures_crashes_hangs_and_agent_errors_are_recorded_and_reverted(
    tmp_path: Path,
) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    agent = ScriptedAgent([
        "RAISE", "HANG", "WRONG", Proposal(source="", description="no kernel",
                                           error="reply had no kernel"),
        RuntimeError("agent bug"), {"BLOCK_N": 1024},
    ])
    runner_for(ws, state, plan, agent, FakeBench(), loop_config(max_consecutive_reverts=10)).run()
    rows = assert_consistent(ws, state)
    assert [r["status"] for r in rows] == ["baseline", "crash", "timeout", "fail", "fail",
                                           "fail", "keep"]
    assert rows[4]["stage"] == "agent" and "reply had no kernel" in rows[4]["reason"]
    assert "RuntimeError: agent bug" in rows[5]["reason"]
    assert rows[4]["correctness"] == "ERROR"
    assert "HANG" not in ws.read_kernel() and "# RAISE" not in ws.read_kernel()
    assert state.targets[0].stop_rule == "exhausted"
    assert agent.observed[-1] == ("set {'BLOCK_N': 1024}", True)


def test_plateau_rule_moves_on_after_consecutive_reverts(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path)
    agent = ScriptedAgent(["WRONG", "same 1", "same 2"] + ["x"] * 10)
    runner_for(ws, state, plan, agent, FakeBench(), loop_config(max_consecutive_reverts=3)).run()
    first = state.targets[0]
    assert first.stop_rule == "plateau" and first.experiments == 3
    assert "3 consecutive" in first.stop_reason
    assert_consistent(ws, state)


def test_speedup_rule_uses_the_faster_pytorch_baseline(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    # The starter (latency 16) is 2.5x eager (40) but only 1.56x compile (25): not done yet.
    agent = ScriptedAgent([{"BLOCK_N": 1024, "NUM_WARPS": 8}, "never reached"])
    runner_for(ws, state, plan, agent, FakeBench(),
               loop_config(target_speedup=2.0)).run()
    target = state.targets[0]
    assert target.experiments == 1 and target.stop_rule == "speedup"  # 10 µs: 2.5x compile
    assert agent.edits == ["never reached"]


def test_time_rule_uses_the_targets_own_clock(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path)
    now = [0.0]

    def clock() -> float:
        now[0] += 10.0  # every reading of the clock is 10 s later
        return now[0]

    runner = Runner(ws, plan, state, loop_config(target_seconds=300), TunerAgent(seed=2),
                    bench=FakeBench(), dashboard=PlainDashboard(stream=open(os.devnull, "w")),
                    starter_source=STARTERS.__getitem__, clock=clock)
    runner.run()
    first, second = state.targets
    assert first.stop_rule == "time" and second.stop_rule == "time"
    # The second target got its own 300 s, not what was left of a global clock.
    assert 300 <= second.seconds < 400 and second.experiments >= 3
    assert state.run_seconds >= first.seconds + second.seconds


def test_hours_budget_is_shared_between_targets_and_stops_the_run(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, hours=600 / 3600)
    now = [0.0]

    def clock() -> float:
        now[0] += 5.0
        return now[0]

    config = loop_config(max_consecutive_reverts=None)
    config.hours = 600 / 3600
    runner = Runner(ws, plan, state, config, TunerAgent(seed=3), bench=FakeBench(),
                    dashboard=PlainDashboard(stream=open(os.devnull, "w")),
                    starter_source=STARTERS.__getitem__, clock=clock)
    reason = runner.run()
    first, second = state.targets
    assert first.visit_budget_seconds == pytest.approx(300, abs=20)  # half of the run's 600 s
    assert first.stop_rule == "time" and "share" in first.stop_reason
    assert second.stop_rule in ("time", "hours")
    assert "time budget" in reason and state.finished
    assert_consistent(ws, state)


def test_resume_with_more_hours_extends_a_finished_run(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, hours=100 / 3600)
    now = [0.0]

    def clock() -> float:
        now[0] += 0.5
        return now[0]

    def runner(agent: Any) -> Runner:
        config = loop_config(max_consecutive_reverts=None)
        config.hours, config.revisit = state.hours, True
        return Runner(ws, plan, state, config, agent, bench=FakeBench(),
                      dashboard=PlainDashboard(stream=open(os.devnull, "w")),
                      starter_source=STARTERS.__getitem__, clock=clock)

    assert "time budget" in runner(TunerAgent(seed=4)).run()
    done = state.next_experiment
    assert state.finished and all(t.stop_rule in ("time", "hours") for t in state.targets)
    state.finished = False
    extended = runner(TunerAgent(seed=4))
    extended.extend_hours(300 / 3600)
    reason = extended.run()
    assert state.next_experiment > done and state.visit_round >= 2
    # Either the new budget is spent, or the targets ran out of things to try before it was.
    assert ("time budget" in reason and state.run_seconds >= 300) or (
        reason == "every target is done" and state.run_seconds < 300)
    assert_consistent(ws, state)


def test_agent_stop_ends_the_run_cleanly(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path)
    agent = ScriptedAgent([{"BLOCK_N": 512}, AgentStop("cost cap of $1.00 reached")])
    reason = runner_for(ws, state, plan, agent, FakeBench()).run()
    assert "cost cap" in reason and state.finished
    assert state.targets[0].stop_rule == "stopped" and state.targets[1].status == "pending"
    assert (ws.root / "kernels" / "01_softmax.py").exists()
    assert_consistent(ws, state)


def test_revisits_continue_plateaued_targets_while_time_is_left(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, hours=1.0)
    config = loop_config(max_consecutive_reverts=2)
    config.hours, config.revisit = 1.0, True
    runner = runner_for(ws, state, plan, TunerAgent(seed=5), FakeBench(), config)
    runner.run()
    rows = assert_consistent(ws, state)
    assert state.visit_round >= 2
    assert any(t.visits >= 2 for t in state.targets)
    subjects = git(ws, "log", "--format=%s")
    assert "revisit 01_softmax" in subjects
    # Revisits continue the search: no configuration of a target is measured twice.
    for tag in ("01_softmax", "02_rmsnorm"):
        configs = [r["tunables"] for r in rows if r["tag"] == tag]
        assert len(configs) == len(set(configs))
    assert state.finished


# ---------------------------------------------------------------------------------------------
# Resume: an interruption at every phase of an experiment


class Killed(BaseException):
    """Stands in for kill -9: nothing after the raise point runs."""


def interrupted_run(tmp_path: Path, at: str, monkeypatch: pytest.MonkeyPatch
                    ) -> tuple[Workspace, Plan, int]:
    """Run until experiment 3 reaches `at`, then die there; return the dead run's workspace."""
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    edits = [{"BLOCK_N": 512}, {"NUM_WARPS": 8}, {"BLOCK_N": 1024}, {"NUM_WARPS": 2},
             {"VARIANT": "two_pass"}]
    bench = FakeBench()
    runner = runner_for(ws, state, plan, ScriptedAgent(edits), bench,
                        loop_config(max_experiments=5))
    victim = 3  # a revert ({"NUM_WARPS": 2} is slower than the best)
    if at == "after-commit":
        victim = 2  # a keep

    with monkeypatch.context() as patch:
        if at == "bench":
            def die_in_bench(result: BenchResult) -> None:
                if len(bench.calls) == victim + 1:
                    raise Killed
            bench.before_return = die_in_bench
        elif at == "after-journal-benchmarked":
            original_save = RunState.save

            def save(self: RunState, path: Any) -> None:
                original_save(self, path)
                flight = self.in_flight
                if flight and flight.experiment == victim and flight.phase == "benchmarked":
                    raise Killed
            patch.setattr(RunState, "save", save)
        elif at == "after-commit":
            original_commit = Workspace.commit_paths

            def commit_paths(self: Workspace, message: str, paths: list[str]) -> str:
                sha = original_commit(self, message, paths)
                if message.startswith(f"exp {victim} "):
                    raise Killed
                return sha
            patch.setattr(Workspace, "commit_paths", commit_paths)
        elif at == "after-record":
            original_append = ResultsLog.append

            def append(self: ResultsLog, row: Any) -> None:
                original_append(self, row)
                if row.experiment == victim:
                    raise Killed
            patch.setattr(ResultsLog, "append", append)
        with pytest.raises(Killed):
            runner.run()
    return ws, plan, victim


@pytest.mark.parametrize("at", ["bench", "after-journal-benchmarked", "after-commit",
                                "after-record"])
def test_resume_after_an_interruption_loses_and_duplicates_nothing(
    tmp_path: Path, at: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, plan, victim = interrupted_run(tmp_path, at, monkeypatch)
    state = RunState.load(ws.state_path)
    assert state.in_flight is not None and state.in_flight.experiment == victim
    all_edits = [{"BLOCK_N": 512}, {"NUM_WARPS": 8}, {"BLOCK_N": 1024}, {"NUM_WARPS": 2},
                 {"VARIANT": "two_pass"}]
    edits_left = all_edits[victim:]
    bench = FakeBench()
    runner = runner_for(ws, state, plan, ScriptedAgent(edits_left), bench,
                        loop_config(max_experiments=5))
    runner.run()
    rows = assert_consistent(ws, state)
    assert [r["description"] for r in rows][1:] == [
        "set {'BLOCK_N': 512}", "set {'NUM_WARPS': 8}", "set {'BLOCK_N': 1024}",
        "set {'NUM_WARPS': 2}", "set {'VARIANT': 'two_pass'}"]
    assert [r["status"] for r in rows] == ["baseline", "keep", "keep", "keep", "revert", "revert"]
    # The interrupted experiment was benchmarked again only if it had not been benchmarked.
    assert len(bench.calls) == len(edits_left) + (1 if at == "bench" else 0)
    assert state.targets[0].experiments == 5 and state.targets[0].keeps == 3


def test_agent_calls_without_a_kernel_do_not_end_a_target_on_a_plateau(tmp_path: Path) -> None:
    """An API outage judges nothing: its rows are `no_kernel`, outside the plateau count, so the
    agent that comes back (or the tuner it hands over to) still has the target."""
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    outage = [Proposal(source="", description="claude", error="no kernel: API error 529")] * 4
    agent = ScriptedAgent([*outage, "WRONG", {"BLOCK_N": 1024}])
    runner_for(ws, state, plan, agent, FakeBench(), loop_config(max_consecutive_reverts=2)).run()
    rows = assert_consistent(ws, state)
    assert [r["phase"] for r in rows] == ["baseline", *["no_kernel"] * 4, "search", "search"]
    assert [r["status"] for r in rows][-2:] == ["fail", "keep"]
    assert state.targets[0].stop_rule != "plateau"


def test_resume_after_a_kill_right_after_an_agent_failure_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    agent = ScriptedAgent([Proposal(source="", description="no kernel", error="no kernel in reply"),
                           {"BLOCK_N": 512}])
    original_append = ResultsLog.append

    def append(self: ResultsLog, row: Any) -> None:
        original_append(self, row)
        if row.experiment == 1:
            raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(ResultsLog, "append", append)
        with pytest.raises(Killed):
            runner_for(ws, state, plan, agent, FakeBench(), loop_config(max_experiments=2)).run()
    state = RunState.load(ws.state_path)
    runner_for(ws, state, plan, agent, FakeBench(), loop_config(max_experiments=2)).run()
    rows = assert_consistent(ws, state)
    assert [r["status"] for r in rows] == ["baseline", "fail", "keep"]
    assert state.targets[0].experiments == 2


def test_a_subset_of_the_plans_targets_runs_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan(("softmax", "rmsnorm", "softmax"))
    ws, state, plan = new_run(tmp_path, plan, chosen=[1, 2])  # as --skip would leave them
    original_append = ResultsLog.append

    def append(self: ResultsLog, row: Any) -> None:
        original_append(self, row)
        if row.experiment == 4:
            raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(ResultsLog, "append", append)
        with pytest.raises(Killed):
            runner_for(ws, state, plan, TunerAgent(seed=0), FakeBench(),
                       loop_config(max_experiments=3)).run()
    state = RunState.load(ws.state_path)
    assert state.in_flight is not None and state.in_flight.target == 1
    runner_for(ws, state, plan, TunerAgent(seed=0), FakeBench(),
               loop_config(max_experiments=3)).run()
    rows = assert_consistent(ws, state)
    assert [t.tag for t in state.targets] == ["02_rmsnorm", "03_softmax"]
    assert [r["tag"] for r in rows] == ["02_rmsnorm"] * 4 + ["03_softmax"] * 4
    assert all(t.status == "done" and t.experiments == 3 for t in state.targets)


def test_resume_refuses_a_branch_that_lost_a_kept_commit(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    runner_for(ws, state, plan, ScriptedAgent([{"BLOCK_N": 512}]), FakeBench(),
               loop_config(max_experiments=1)).run()
    git(ws, "reset", "--hard", "HEAD~2")  # someone rewrote the branch
    state = RunState.load(ws.state_path)
    with pytest.raises(RunInconsistent):
        runner_for(ws, state, plan, ScriptedAgent([]), FakeBench()).run()


def test_results_log_cuts_a_torn_last_row(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    runner_for(ws, state, plan, ScriptedAgent([{"BLOCK_N": 512}]), FakeBench(),
               loop_config(max_experiments=1)).run()
    complete = ws.results_path.read_text()
    with open(ws.results_path, "a") as handle:
        handle.write("2\t01_softmax\tsoftmax\t")  # power lost mid-row
    log = ResultsLog.open(ws.results_path)
    assert ws.results_path.read_text() == complete
    assert log.last_experiment == 1 and not log.has(2)


# ---------------------------------------------------------------------------------------------
# Dashboards


def test_dashboards_show_targets_results_and_time_left(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from autokernel.loop.dashboard import LiveDashboard, make_dashboard

    ws, state, plan = new_run(tmp_path / "plain", hours=2.0)
    runner = runner_for(ws, state, plan, TunerAgent(seed=0), FakeBench(),
                        loop_config(max_experiments=3))
    plain_out = io.StringIO()
    runner.dashboard = PlainDashboard(stream=plain_out)
    runner.run()
    lines = plain_out.getvalue().splitlines()
    assert any("exp 0 01_softmax BASELINE" in line and "× eager" in line for line in lines)
    assert any(line.endswith("; moved on: experiments: 3 on this target (limit 3)")
               for line in lines)

    ws, state, plan = new_run(tmp_path / "live", hours=2.0)
    console = Console(file=io.StringIO(), width=160, record=True, force_terminal=True)
    live = make_dashboard(console, title="autokernel m-1", device="cpu", agent="tuner",
                          timing_note="cpu: timings not meaningful")
    assert isinstance(live, LiveDashboard)
    runner = runner_for(ws, state, plan, TunerAgent(seed=0), FakeBench(),
                        loop_config(max_experiments=3))
    runner.dashboard = live
    # Why the run stopped is said once, by the end-of-run summary (autokernel.loop.summary).
    assert runner.run() == "every target is done"
    text = console.export_text()
    assert "every target is done" not in text
    for words in ("01_softmax", "02_rmsnorm", "time left 2.0 h", "experiments 8", "baseline",
                  "last experiments", "cpu: timings not meaningful", "Ctrl-C", "tuner: "):
        assert words in text, words
    assert not isinstance(make_dashboard(Console(file=io.StringIO()), title="t", device="cpu",
                                         agent="tuner"), LiveDashboard)


class PairedFakeBench(FakeBench):
    """FakeBench that reports paired rounds against the incumbent it was given (three noiseless
    rounds at the fake ratio)."""

    def judge(self, source: str, device: str, shapes: list[list[int]], dtypes: list[str], *,
              quick: bool, incumbent: Path | None) -> BenchResult:
        result = super().judge(source, device, shapes, dtypes, quick=quick, incumbent=incumbent)
        if incumbent is not None and result.passed:
            best = fake_latency(parse_kernel_source(Path(incumbent).read_text()).tunables)
            for i, timing in enumerate(result.timings):
                timing.incumbent_us = best * (i + 1)
                timing.paired_ratios = [best / result.latency_us] * 3
        return result


def run_screened(tmp_path: Path, bench: FakeBench) -> list[dict[str, str]]:
    """Ten screened tuner experiments on one softmax target; the rows, checked consistent."""
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    runner = runner_for(ws, state, plan, TunerAgent(seed=0), bench,
                        loop_config(screen=True, max_experiments=10,
                                    max_consecutive_reverts=None))
    runner.run()
    return assert_consistent(ws, state)


def test_candidates_are_screened_quick_and_confirmed_in_full_before_a_keep(
        tmp_path: Path) -> None:
    bench = PairedFakeBench()
    rows = run_screened(tmp_path, bench)
    calls = bench.calls
    assert calls[0]["quick"] is False and calls[0]["incumbent"] is None  # the baseline: full
    # Every experiment is screened against the best so far; a keep then runs the full harness.
    screens = [c for c in calls[1:] if c["quick"]]
    assert len(screens) == 10 and all(c["incumbent"] is not None for c in screens)
    kept = [r for r in rows if r["status"] == "keep"]
    assert kept and len(calls) == 1 + 10 + len(kept)
    for row in kept:
        assert float(row["vs_best_lo"]) > 1.01 and "full harness" in row["reason"]
    reverts = [r for r in rows if r["status"] == "revert"]
    assert reverts and all(r["reason"].endswith("[quick screen]") for r in reverts)
    assert all("lower bound not above 1.010×" in r["reason"] for r in reverts)


class NoisyScreenBench(PairedFakeBench):
    """The screen's few rounds spread ±10% around the true ratio; the full harness's do not."""

    def judge(self, source: str, device: str, shapes: list[list[int]], dtypes: list[str], *,
              quick: bool, incumbent: Path | None) -> BenchResult:
        result = super().judge(source, device, shapes, dtypes, quick=quick, incumbent=incumbent)
        if quick:
            for timing in result.timings:
                if timing.paired_ratios:
                    r = timing.paired_ratios[0]
                    timing.paired_ratios = [0.9 * r, r, 1.1 * r]
        return result


def test_a_win_too_noisy_for_the_screen_still_gets_the_full_verdict(tmp_path: Path) -> None:
    rows = run_screened(tmp_path, NoisyScreenBench())
    kept = [r for r in rows if r["status"] == "keep"]
    assert kept, "no candidate's win survived a noisy screen"
    for row in kept:
        assert "promising on the quick screen" in row["reason"]
        assert float(row["vs_best_lo"]) > 1.01
    for row in (r for r in rows if r["status"] == "revert"):
        screened_only = row["reason"].endswith("[quick screen]")
        assert not screened_only or float(row["vs_best"]) <= 1.01, row
