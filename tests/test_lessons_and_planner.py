"""Per-target lessons.md and the hypothesis column across kill -9 and resume; the Claude agent's
planner (one request without tools before the coder) and what its prompt shows.

The loop runs here with test_workspace's synthetic harness (latency from the tunables), so a
killed and resumed run takes seconds; every git operation, journal phase, row and lesson is real.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from autokernel.agents.base import Attempt, Proposal
from autokernel.agents.tuner import TunerAgent
from autokernel.agents.claude_planner import numbered
from autokernel.agents.claude_prompt import describe_experiment, extract_lesson
from autokernel.loop.context import Briefing
from autokernel.loop.lessons import format_entry, lessons_for_prompt, read_entries, record_lesson
from autokernel.loop.results import ResultRow, ResultsLog
from autokernel.loop.state import RunState
from autokernel.loop.workspace import Workspace
from scripted_model import Reply, ScriptedModel, api_error, call, done, opening_text
from test_claude_agent import BASE_KERNEL, EDITED_KERNEL, make_context, sdk
from test_workspace import (
    FakeBench, Killed, ScriptedAgent, assert_consistent, loop_config, make_plan, new_run,
    runner_for,
)

TESTS = Path(__file__).resolve().parent
EXPERIMENTS = 6

# The run in its own process, to be killed with SIGKILL; each harness verdict takes 0.1 s.
DRIVER = f"""
import sys, time
from pathlib import Path
sys.path.insert(0, {str(TESTS)!r})
from autokernel.agents.tuner import TunerAgent
from test_workspace import FakeBench, loop_config, make_plan, new_run, runner_for
ws, state, plan = new_run(Path(sys.argv[1]), make_plan(("softmax",)))
bench = FakeBench()
bench.before_return = lambda result: time.sleep(0.1)
runner_for(ws, state, plan, TunerAgent(seed=0), bench,
           loop_config(max_experiments={EXPERIMENTS})).run()
"""


def start_run(where: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(where)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def rows_written(results: Path) -> int:
    try:
        return max(0, len(results.read_text().splitlines()) - 1)
    except OSError:
        return 0


def assert_one_whole_entry_per_experiment(path: Path, experiments: int) -> list[str]:
    text = path.read_text()
    assert text.endswith("\n")
    assert [e.experiment for e in read_entries(path)] == list(range(experiments))
    for line in text.splitlines():  # every line whole: the title, a header, a field, or blank
        assert line == "" or line.startswith(("# Lessons on ", "One entry", "## #", "- ")), line
    assert not list(path.parent.glob("*.tmp")), "a temporary file was left behind"
    return text.splitlines()


def test_lessons_and_hypotheses_survive_kill9_and_resume(tmp_path: Path) -> None:
    results = tmp_path / "run" / "results.tsv"
    proc = start_run(tmp_path)
    deadline = time.monotonic() + 60
    while rows_written(results) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert rows_written(results) < EXPERIMENTS + 1  # killed mid-run
    # The loop runs git in its own session, so a git command the kill cut off may outlive the
    # loop by a moment: let it finish, as it would long before a real resume.
    lock = tmp_path / "run" / ".git" / "index.lock"
    deadline = time.monotonic() + 10
    while lock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)

    # Resume as `autokernel resume` does (Runner.run repairs first), in this process: the CLI
    # would run the real harness, minutes on the CPU interpreter.
    ws = Workspace.open(tmp_path / "run")
    state = RunState.load(ws.state_path)
    runner_for(ws, state, make_plan(("softmax",)), TunerAgent(seed=0), FakeBench(),
               loop_config(max_experiments=EXPERIMENTS)).run()
    rows = assert_consistent(ws, state)
    assert len(rows) == EXPERIMENTS + 1
    lessons = ws.lessons_path("01_softmax")
    lines = assert_one_whole_entry_per_experiment(lessons, len(rows))
    assert sum(line.startswith("## #") for line in lines) == len(rows)
    # Every tuner step says why it was tried (the tuner's reason), and the column reads back.
    tried = [r for r in rows if r["status"] != "baseline"]
    assert all(r["hypothesis"] for r in tried), [r["hypothesis"] for r in tried]
    config = loop_config(max_experiments=EXPERIMENTS)
    context = Briefing(ws, make_plan(("softmax",)), config).context(
        state.targets[0], state.next_experiment, ResultsLog.open(ws.results_path))
    assert [a.hypothesis for a in context.history] == [r["hypothesis"] for r in rows]
    assert "## #1 " in context.lessons and f"## #{EXPERIMENTS} " in context.lessons


@pytest.mark.parametrize("dies", ["after-the-row", "after-the-lesson"])
def test_an_experiment_killed_around_its_lesson_gets_exactly_one_entry(
    tmp_path: Path, dies: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    edits: list[Any] = [
        {"BLOCK_N": 512},
        Proposal(source="", description="widen the row loop", hypothesis="plan 1: fewer trips",
                 lesson="the loop count is not the cost"),
        {"NUM_WARPS": 8},
    ]
    # Experiment 2 is an edit with a hypothesis and the agent's lesson: its source (two warps, a
    # revert) is made from the best when it is proposed.
    agent = ScriptedAgent(list(edits))
    original_propose = agent.propose

    def propose(context: Any) -> Proposal | None:
        proposal = original_propose(context)
        if proposal is not None and not proposal.source:
            proposal.source = context.best_source.replace("NUM_WARPS = 4", "NUM_WARPS = 2")
        return proposal

    agent.propose = propose  # type: ignore[method-assign]
    import autokernel.loop.journal as journal_module

    with monkeypatch.context() as patch:
        if dies == "after-the-row":
            original_append = ResultsLog.append

            def append(self: ResultsLog, row: Any) -> None:
                original_append(self, row)
                if row.experiment == 2:
                    raise Killed
            patch.setattr(ResultsLog, "append", append)
        else:
            original_record = journal_module.record_lesson

            def record(path: Path, row: ResultRow, *args: Any, **kwargs: Any) -> bool:
                written = original_record(path, row, *args, **kwargs)
                if row.experiment == 2:
                    raise Killed
                return written
            patch.setattr(journal_module, "record_lesson", record)
        with pytest.raises(Killed):
            runner_for(ws, state, plan, agent, FakeBench(), loop_config(max_experiments=3)).run()
    lessons = ws.lessons_path("01_softmax")
    assert [e.experiment for e in read_entries(lessons)] == ([0, 1] if dies == "after-the-row"
                                                             else [0, 1, 2])
    state = RunState.load(ws.state_path)
    assert state.in_flight is not None
    assert state.in_flight.lesson == "the loop count is not the cost"  # journaled with the rest
    runner_for(ws, state, plan, agent, FakeBench(), loop_config(max_experiments=3)).run()
    assert_consistent(ws, state)
    assert_one_whole_entry_per_experiment(lessons, 4)
    entry = read_entries(lessons)[2].text
    assert "- tried: widen the row loop" in entry and "- hypothesis: plan 1: fewer trips" in entry
    assert "- agent's lesson: the loop count is not the cost" in entry
    assert "NUM_WARPS 4 -> 2" in entry


# -- what an entry says --------------------------------------------------------------------------


def row(experiment: int, status: str, **fields: Any) -> ResultRow:
    defaults: dict[str, Any] = dict(tag="01_softmax", kernel_type="softmax", throughput_tflops=None,
                                    latency_us=None, pct_peak=None, speedup_vs_pytorch=None,
                                    correctness="PASS", peak_vram_mb=None, description="an idea",
                                    agent="claude", target_rank=1, shape="64x128", dtype="fp32")
    defaults.update(fields)
    return ResultRow(experiment=experiment, status=status, **defaults)


BEST = Attempt(3, "tuner: BLOCK_N=128", "keep", latency_us=50.0,
               tunables={"BLOCK_N": 128, "VARIANT": "one_pass"}, launch_digest="d" * 16)


def test_entries_give_the_verdict_with_its_figure_and_a_takeaway() -> None:
    kept = format_entry(row(4, "keep", objective_us=40.0, vs_best=1.25,
                            tunables={"BLOCK_N": 256, "VARIANT": "one_pass"},
                            hypothesis="plan 2: one pass"), BEST, lesson="stores were the cost")
    assert kept.startswith("## #4 keep: kept at 40.0 µs = 1.25× best (claude)\n")
    assert "- hypothesis: plan 2: one pass" in kept
    assert "- taught: this change (BLOCK_N 128 -> 256) helps: 1.25× the previous best" in kept
    assert "- agent's lesson: stores were the cost" in kept

    inert = format_entry(row(5, "revert", agent="tuner", description="tuner: BLOCK_N=256",
                             objective_us=50.2, vs_best=0.99, tunables={"BLOCK_N": 256},
                             launch_digest="d" * 16), BEST)
    assert inert.count("\n") == 1  # a tuner step is one line
    assert "reverted at 50.2 µs: 1.0% slower" in inert
    assert "BLOCK_N 128 -> 256 did nothing: same launch digest as the best (exp 3)" in inert

    failed = format_entry(row(6, "fail", correctness="FAIL", stage="correctness",
                              reason="max error 3.2 at N=4096",
                              tunables={"BLOCK_N": 128, "VARIANT": "two_pass"}), BEST)
    assert "## #6 fail: failed at stage correctness: max error 3.2 at N=4096" in failed
    assert "VARIANT one_pass -> two_pass) fails correctness: max error 3.2 at N=4096" in failed


def test_the_prompt_excerpt_is_bounded_and_puts_what_teaches_most_first(tmp_path: Path) -> None:
    path = tmp_path / "lessons" / "01_softmax.md"
    history = [Attempt(0, "starter", "baseline", latency_us=60.0)]
    for n in range(1, 60):
        step = row(n, "revert", agent="tuner", description=f"tuner: BLOCK_N={n}",
                   objective_us=61.0, tunables={"BLOCK_N": n})
        assert record_lesson(path, step, history)
        assert not record_lesson(path, step, history)  # once per experiment
    assert record_lesson(path, row(60, "revert", objective_us=65.0, description="split rows"),
                         history, lesson="splitting rows costs a second pass")
    excerpt = lessons_for_prompt(path, limit_chars=1500)
    assert len(excerpt) <= 1500 + 200
    assert excerpt.startswith("## #60 revert")  # the agent's own lesson first
    assert "## #59 " in excerpt and "## #1 " not in excerpt  # then the newest steps
    assert "entries left out; read_file lessons/01_softmax.md" in excerpt
    assert lessons_for_prompt(tmp_path / "none.md") == ""


# -- the Claude agent: prompt and planner --------------------------------------------------------


def test_the_prompt_shows_lessons_and_each_attempts_hypothesis_from_results() -> None:
    history = [Attempt(0, "starter", "baseline", latency_us=50.0),
               Attempt(1, "stream x", "revert", latency_us=52.0,
                       hypothesis="plan 1: evict_first frees L2 for the output")]
    context = make_context(history=history, experiment=2)
    context.lessons = "## #1 revert: reverted at 52.0 µs: 4.0% slower (claude)\n- tried: stream x\n"
    prompt = describe_experiment(context, history_limit=40, plans="Plan 1: fold the loop")
    assert "#1 revert" in prompt and "(hypothesis: plan 1: evict_first frees L2" in prompt
    assert "# Lessons on this target" in prompt and "- tried: stream x" in prompt
    assert "Plan 1: fold the loop" in prompt and "'plan 2: ...'" in prompt
    assert extract_lesson("Done.\n**Lesson:** loads dominate\n") == "loads dominate"
    assert extract_lesson("Done, no lesson.") == ""


PLANS = ("Plan 1: one chunk per row\n- where: L20-L24\n- change: BLOCK_N covers the row\n"
         "- predicted effect: 4x fewer loop trips\n- risk: registers at N=1<<20")


def planning_script(planner: Reply) -> Any:
    """The planner's request (no tools) gets `planner`; the coder writes a kernel, then ends."""
    def script(request: dict[str, Any]) -> Reply:
        if not request.get("tools"):
            return planner
        if len(request["messages"]) == 1:
            return call("write_kernel", source=EDITED_KERNEL, description="one chunk per row",
                        hypothesis="plan 1: one chunk per row cuts the loop")
        return done("Done.\nLesson: the row loop is the cost here")
    return script


def scripted_agent(model: ScriptedModel, **options: Any) -> Any:
    from autokernel.agents.claude import ClaudeAgent

    return ClaudeAgent(api_key="sk-ant-test", http_client=model.client(), failure_backoff_s=0.0,
                       sleep=lambda seconds: None, **options)


def test_the_planner_plans_without_tools_and_the_coder_implements_a_plan() -> None:
    sdk()
    model = ScriptedModel(planning_script(Reply([{"type": "text", "text": PLANS}],
                                                input_tokens=3000, output_tokens=400)))
    agent = scripted_agent(model)
    proposal = agent.propose(make_context())
    assert proposal is not None and not proposal.error and proposal.source == EDITED_KERNEL
    first, coder = model.requests[0], model.requests[1]
    assert "tools" not in first and first["max_tokens"] <= 4096
    briefing = opening_text(first)
    assert "Write 2 or 3 concrete plans" in briefing and "predicted effect" in briefing
    assert numbered(BASE_KERNEL).splitlines()[0] in briefing  # the kernel, line by line
    assert coder["tools"] and PLANS in opening_text(coder)
    assert proposal.hypothesis.startswith("plan 1:")  # the coder says which plan it took
    assert proposal.lesson == "the row loop is the cost here"
    # The planning call is one of the experiment's calls, in its tokens and the run's budget.
    assert proposal.llm_calls == 3 and agent.total.calls == 3
    assert proposal.input_tokens == 3000 + 1000 + 1000
    assert proposal.output_tokens == 400 + 200 + 200


@pytest.mark.parametrize("planner_reply", [api_error(400, "invalid_request_error"), Reply([])],
                         ids=["api-error", "empty-reply"])
def test_a_failed_planning_call_leaves_the_coder_without_plans_not_the_experiment(
    planner_reply: Reply,
) -> None:
    sdk()
    model = ScriptedModel(planning_script(planner_reply))
    agent = scripted_agent(model)
    proposal = agent.propose(make_context())
    assert proposal is not None and not proposal.error and proposal.source == EDITED_KERNEL
    assert "# Plans for this experiment" not in opening_text(model.requests[1])
    assert agent.planner.last_error
    billed = 1 if planner_reply.status == 200 else 0  # an empty reply was still billed
    assert proposal.llm_calls == 2 + billed


def test_the_planner_is_an_option_with_its_own_model() -> None:
    sdk()
    model = ScriptedModel(planning_script(Reply([{"type": "text", "text": PLANS}])))
    scripted_agent(model, planner=False).propose(make_context())
    assert all(r.get("tools") for r in model.requests)
    model = ScriptedModel(planning_script(Reply([{"type": "text", "text": PLANS}])))
    scripted_agent(model, planner_model="claude-haiku-5-5").propose(make_context())
    assert model.requests[0]["model"] == "claude-haiku-5-5"
    assert model.requests[1]["model"] != "claude-haiku-5-5"
