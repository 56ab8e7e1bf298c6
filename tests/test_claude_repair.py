"""The Claude agent's repair loop, offline: compile_kernel and test_kernel find a draft's errors
inside the turn, so the kernel that reaches the harness is the repaired one.

The model is tests/scripted_model.py's rule-driven endpoint behind the real SDK; the tools are the
real ones (the AOT sm_90 compile in a child process, the harness's correctness stages on the CPU
Triton interpreter at 8x64), the drafts tests/repair_corpus.py's real errors.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from autokernel.agents.base import AgentContext, Attempt, Proposal
from autokernel.agents.claude import ClaudeAgent
from autokernel.agents.claude_checks import CheckRunners
from autokernel.agents.claude_prompt import describe_history
from autokernel.aot import AotResult
from autokernel.harness.result import BenchResult, Status
from autokernel.loop.dashboard import PlainDashboard
from autokernel.loop.results import read_rows
from autokernel.loop.runner import Runner
from repair_corpus import BASE, CORPUS, INTENDED, BrokenDraft
from scripted_model import (
    Reply, Request, ScriptedModel, call, done, last_tool_results, result_text, tool_names,
    tool_uses,
)
from test_claude_agent import make_context, sdk
from test_workspace import FakeBench, ScriptedAgent, loop_config, make_plan, new_run, runner_for

SHAPE = [8, 64]
PASSED = ("compile_kernel: OK", "test_kernel: PASS")


def cpu_context(experiment: int = 1, workspace: str | None = None) -> AgentContext:
    """The reduce target on the CPU interpreter at a tiny shape, in float32."""
    context = make_context(BASE, experiment, workspace=workspace)
    context.device = "cpu"
    context.target.shapes, context.target.bench_shape = [SHAPE], SHAPE
    context.target.dtype = "fp32"
    return context


def agent_for(script: Callable[[Request], Reply], **options: Any) -> tuple[ClaudeAgent,
                                                                           ScriptedModel]:
    sdk()
    model = ScriptedModel(script)
    agent = ClaudeAgent(api_key="sk-ant-test", http_client=model.client(),
                        failure_backoff_s=0.0, sleep=lambda seconds: None, max_turns=12,
                        **options)
    return agent, model


def repair_script(draft: BrokenDraft) -> Callable[[Request], Reply]:
    """Write the broken draft, check it with the tool that finds its error, fix it when the
    check reports one and check again, then end the turn."""

    def script(request: Request) -> Reply:
        if "write_kernel" not in tool_names(request):
            return done("1. one idea")  # a planning request (no tools)
        uses = tool_uses(request)
        if not uses:
            return call("write_kernel", source=draft.source, description=f"draft: {draft.name}",
                        hypothesis="fewer instructions per element")
        if uses[-1]["name"] in ("write_kernel", "edit_kernel"):
            return call(draft.tool)
        answer = result_text(last_tool_results(request)[-1])
        fixed = any(u["name"] == "edit_kernel" for u in uses)
        if not answer.startswith(PASSED) and not fixed:
            return call("edit_kernel", old=draft.old, new=draft.new,
                        description=f"fixed: {draft.name}")
        return done("Checked; submitting.")

    return script


def repair_one(draft: BrokenDraft) -> dict[str, Any]:
    """One conversation on one broken draft, then the harness on what it submitted."""
    from autokernel.harness.runner import run_bench

    agent, model = agent_for(repair_script(draft))
    proposal = agent.propose(cpu_context())
    checks = [result_text(r) for request in model.requests for r in last_tool_results(request)
              if "use " in result_text(r)]
    assert proposal is not None and not proposal.error, draft.name
    path = Path(f"/tmp/autokernel-repair-{draft.name}-{time.monotonic_ns()}.py")
    path.write_text(proposal.source)
    try:
        verdict = run_bench(path, device="cpu", shapes=[SHAPE], dtypes=["fp32"],
                            correctness_dtypes=["fp32"], model_shapes=[SHAPE], quick=True,
                            correctness_only=True)
    finally:
        path.unlink(missing_ok=True)
    return {"name": draft.name, "found": bool(checks) and not checks[0].startswith(PASSED),
            "last_check_passed": bool(checks) and checks[-1].startswith(PASSED),
            "passes": verdict.passed, "proposal": proposal, "verdict": verdict}


@pytest.mark.slow
def test_repair_loop_fixes_injected_compile_and_correctness_errors() -> None:
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:  # the checks run in child processes
        outcomes = list(pool.map(repair_one, CORPUS))
    # Each injected error is real: the check that should find it reported it first.
    assert all(o["found"] for o in outcomes), [o["name"] for o in outcomes if not o["found"]]
    # Repaired: the last check passed on the submitted draft (a compile error is only visible
    # to compile_kernel: the interpreter does not compile) and the harness passes the proposal.
    repaired = [o for o in outcomes if o["last_check_passed"] and o["passes"]]
    rate = len(repaired) / len(outcomes)
    print(f"\nrepair rate: {len(repaired)}/{len(outcomes)} = {rate:.0%} of injected errors "
          f"repaired before the candidate counts ({time.perf_counter() - started:.0f} s)")
    assert rate >= 0.8
    for outcome in repaired:
        proposal = outcome["proposal"]
        assert proposal.source == INTENDED and proposal.check_calls == 2
        assert "[checked: " in proposal.description


# -- limits and accounting, with instant fake checks ----------------------------------------


def fake_compile(path: Path, target: Any) -> list[AotResult]:
    time.sleep(0.01)
    if "BROKEN" in path.read_text():
        return [AotResult("_row_sums", ok=False, context="fp32 8x64",
                          error="CompilationError: at 5:11: | ...",
                          detail="CompilationError: at 5:11:\n    base = x_ptr + 0.5\n"
                                 "           ^\nIncompatibleTypeErrorImpl('invalid operands')")]
    return [AotResult("_row_sums", ok=True, context="fp32 8x64", num_warps=4, num_stages=3,
                      grid=[2, 1, 1], n_regs=31, shared_bytes=16, local_bytes=0)]


def fake_bench(path: Path, **options: Any) -> BenchResult:
    assert options["correctness_only"] and options["quick"] and options["device"] == "cpu"
    assert options["shapes"] == [SHAPE] and options["correctness_dtypes"] == ["fp32"]
    return BenchResult(status=Status.PASS, device="cpu", harness_seconds=0.5,
                       stages={"smoke": "pass"}, stage_cases={"smoke": 1})


def test_check_tools_are_limited_per_experiment_and_counted(tmp_path: Path) -> None:
    drafts = [BASE.replace("BLOCK_N = 64", f"BLOCK_N = 64  # BROKEN {n}") for n in range(4)]
    plan = [("write", drafts[0]), ("compile_kernel", None), ("compile_kernel", None),
            ("write", drafts[1]), ("compile_kernel", None), ("write", drafts[2]),
            ("compile_kernel", None), ("write", drafts[3]), ("compile_kernel", None),
            ("write", BASE + "# fixed\n"), ("test_kernel", None)]

    def script(request: Request) -> Reply:
        if "write_kernel" not in tool_names(request):
            return done("1. one idea")
        step = len(tool_uses(request))
        if step >= len(plan):
            return done("Submitting.")
        tool, source = plan[step]
        if tool == "write":
            return call("write_kernel", source=source, description="streamed loads",
                        hypothesis="fewer instructions")
        return call(tool)

    agent, model = agent_for(script, checks=CheckRunners(compile=fake_compile, bench=fake_bench))
    proposal = agent.propose(cpu_context(7, workspace=str(tmp_path)))
    answers = [last_tool_results(r) for r in model.requests if last_tool_results(r)]
    compiles = [a[-1] for a in answers if "compile" in result_text(a[-1])]
    assert "FAILED" in result_text(compiles[0]) and "invalid operands" in result_text(compiles[0])
    assert "has not changed" in result_text(compiles[1])  # same draft: answered, not counted
    assert "use 3 of 3" in result_text(compiles[3])
    assert compiles[4]["is_error"] and "limit reached" in result_text(compiles[4])
    assert proposal is not None and not proposal.error
    assert proposal.check_calls == 4 and proposal.check_seconds > 0  # 3 compiles + 1 test
    assert "[checked: compile_kernel x3, test_kernel x1," in proposal.description
    # The drafts the checks failed are kept under the experiment's attempts folder.
    folder = tmp_path / "attempts" / "0007"
    assert (folder / "draft-1.py").read_text() == drafts[0]
    assert "invalid operands" in (folder / "draft-1.error.txt").read_text()
    assert sorted(p.name for p in folder.glob("draft-*.py")) == [
        "draft-1.py", "draft-2.py", "draft-3.py"]  # the 4th compile was refused: not checked


def test_checks_can_be_switched_off() -> None:
    def script(request: Request) -> Reply:
        if "write_kernel" not in tool_names(request):
            return done("1. one idea")
        if not tool_uses(request):
            return call("compile_kernel")
        return done("no kernel")

    agent, model = agent_for(script, checks=CheckRunners(max_uses=0))
    agent.propose(cpu_context())
    [answer] = [r for request in model.requests for r in last_tool_results(request)]
    assert answer["is_error"] and "not available" in result_text(answer)


# -- failed experiments leave their source and full error ------------------------------------


def test_a_failed_experiment_leaves_its_kernel_and_full_error(tmp_path: Path) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    traceback_text = "Traceback (most recent call last):\n" + "".join(
        f'  File "kernel.py", line {n}, in kernel_fn\n' for n in range(200)) + "RuntimeError: boom"
    bench = FakeBench()

    def with_detail(result: BenchResult) -> None:
        if not result.passed:
            result.detail = traceback_text

    bench.before_return = with_detail
    agent = ScriptedAgent(["RAISE", "WRONG"])
    runner_for(ws, state, plan, agent, bench, loop_config(max_consecutive_reverts=10)).run()
    crash, wrong = ws.attempt_dir(1), ws.attempt_dir(2)
    assert "# RAISE" in (crash / "kernel.py").read_text()
    assert "# RAISE" not in ws.read_kernel()  # reverted, yet kept under attempts/
    error = (crash / "error.txt").read_text()
    assert "experiment 1: crash" in error and "stage: smoke" in error
    assert "RuntimeError: boom" in error and traceback_text in error  # the whole text
    assert "max abs error 3.2" in (wrong / "error.txt").read_text()
    assert not ws.attempt_dir(0).exists()  # the baseline passed: nothing to keep
    history = [Attempt(1, "x", "crash", stage="smoke", reason="RuntimeError: boom"),
               Attempt(2, "claude: no kernel", "fail", stage="agent", reason="no reply")]
    lines = history_text(history)
    assert "full error: attempts/0001/error.txt" in lines
    assert "attempts/0002" not in lines  # no harness ran: nothing was saved


def history_text(history: list[Attempt]) -> str:
    """describe_history, whether or not it still takes the hypotheses (they moved into each
    Attempt, read back from results.tsv)."""
    import inspect

    if "hypotheses" in inspect.signature(describe_history).parameters:
        return describe_history(history, hypotheses={}, limit=40)  # type: ignore[call-arg]
    return describe_history(history, limit=40)


def test_the_harness_keeps_the_whole_traceback_of_a_crash(tmp_path: Path) -> None:
    from autokernel.harness.runner import run_bench

    broken = tmp_path / "kernel.py"
    broken.write_text(BASE.replace("tl.sum(acc, axis=1)", "tl.sum(acc, axis=0)"))
    result = run_bench(broken, device="cpu", shapes=[SHAPE], dtypes=["fp32"],
                       correctness_dtypes=["fp32"], model_shapes=[], quick=True,
                       correctness_only=True)
    assert result.status is Status.CRASH and result.stage == "smoke"
    assert result.stages["timing"] == "skip"
    assert "Traceback (most recent call last)" in result.detail
    assert 'File "kernel.py", line' in result.detail  # the private copy's path is not shown
    assert "incompatible dimensions" in result.detail and len(result.detail) <= 8000


def test_proposal_fields_default_to_no_checks() -> None:
    assert Proposal(source="", description="").check_calls == 0


# -- in the loop: no target ends on failures the corpus' fix turns repair ------------------------


def corpus_draft(source: str) -> BrokenDraft | None:
    """The corpus draft `source` is (an experiment's marker may follow it), or None: repaired."""
    return next((d for d in CORPUS if source.startswith(d.source)), None)


def corpus_compile(path: Path, target: Any) -> list[AotResult]:
    """compile_kernel as the real one answers the corpus (the slow test above checks that)."""
    draft = corpus_draft(path.read_text())
    if draft is not None and draft.tool == "compile_kernel":
        return [AotResult("_row_sums", ok=False, context="fp32 8x64", error=draft.what,
                          detail=f"CompilationError: {draft.what}")]
    return [AotResult("_row_sums", ok=True, context="fp32 8x64", num_warps=4, num_stages=3,
                      grid=[2, 1, 1], n_regs=31, shared_bytes=16, local_bytes=0)]


def corpus_test(path: Path, **options: Any) -> BenchResult:
    """test_kernel as the real one answers the corpus: a wrong result fails correctness."""
    draft = corpus_draft(path.read_text())
    if draft is not None and draft.tool == "test_kernel":
        return BenchResult(status=Status.FAIL, stage="correctness", device="cpu",
                           reason=draft.what, detail=f"AssertionError: {draft.what}")
    return BenchResult(status=Status.PASS, device="cpu", harness_seconds=0.5,
                       stages={"correctness": "pass"}, stage_cases={"correctness": 4})


class CorpusBench(FakeBench):
    """The loop's harness on the corpus: a broken draft fails at the stage its error shows in;
    any other kernel passes, each faster than the last, so every repaired draft is kept."""

    def judge(self, source: str, device: str, shapes: list[list[int]], dtypes: list[str], *,
              quick: bool, incumbent: Path | None) -> BenchResult:
        draft = corpus_draft(source)
        if draft is not None:
            stage = "compile" if draft.tool == "compile_kernel" else "correctness"
            return BenchResult(status=Status.FAIL, stage=stage, reason=draft.what)
        return self.passing(30.0 - len(self.calls), device, shapes, dtypes)


class CorpusRepairModel:
    """One corpus draft per conversation (in order), with the marker of its conversation; the
    corpus' fix turn only when a check reports the draft's error, then one more check."""

    def __init__(self) -> None:
        self.conversations = 0

    def __call__(self, request: Request) -> Reply:
        if "write_kernel" not in tool_names(request):
            return done("1. stream the loads past L2")  # a planning request (no tools)
        uses = tool_uses(request)
        draft = CORPUS[(self.conversations - (1 if uses else 0)) % len(CORPUS)]
        if not uses:
            self.conversations += 1
            return call("write_kernel", source=f"{draft.source}# draft {self.conversations}\n",
                        description=f"evict-first loads ({draft.name})",
                        hypothesis="x is read once: stream it past L2")
        if uses[-1]["name"] in ("write_kernel", "edit_kernel"):
            return call(draft.tool)
        answer = result_text(last_tool_results(request)[-1])
        reported = answer.startswith(("compile_kernel: FAILED", "test_kernel: FAIL"))
        if reported and not any(u["name"] == "edit_kernel" for u in uses):
            return call("edit_kernel", old=draft.old, new=draft.new, description="fixed")
        return done("Submitting.")


def corpus_loop(tmp_path: Path, checks: CheckRunners) -> tuple[list[dict[str, str]], Any]:
    """Six experiments of the real loop on a reduce target, one corpus draft each, with the
    plateau rule at its default of 5 non-kept experiments in a row."""
    ws, state, plan = new_run(tmp_path, make_plan(("reduce",)))
    agent, _ = agent_for(CorpusRepairModel(), checks=checks)
    config = loop_config(max_consecutive_reverts=5, max_experiments=len(CORPUS))
    Runner(ws, plan, state, config, agent, bench=CorpusBench(),
           dashboard=PlainDashboard(stream=open(os.devnull, "w")),
           starter_source=lambda kernel_type: BASE).run()
    return read_rows(ws.results_path), state.targets[0]


def test_no_target_ends_on_failures_the_corpus_fix_turns_repair(tmp_path: Path) -> None:
    rows, target = corpus_loop(tmp_path / "checked",
                               CheckRunners(compile=corpus_compile, bench=corpus_test))
    assert [r["status"] for r in rows] == ["baseline"] + ["keep"] * len(CORPUS)
    assert all("[checked: " in r["description"] for r in rows[1:])
    assert target.stop_rule == "experiments" and target.consecutive_reverts == 0
    # The control: the same model without the tools submits each draft as written, and the
    # target dies of five failures that one more turn each would have repaired.
    rows, target = corpus_loop(tmp_path / "unchecked", CheckRunners(max_uses=0))
    assert [r["status"] for r in rows] == ["baseline"] + ["fail"] * 5
    assert target.stop_rule == "plateau"
