"""The Claude agent's frontier of parents and `--drafts`, offline.

The corpus: from the starter S (18 us), structure A is slower alone (22 us: reverted, a near-miss),
but an edit of A gives B (14 us), faster than anything the scripted model writes from the best (a
tweak that never beats it). The greedy chain (explore 0, or a frontier of size 1) edits only the
best, so it never reaches B; the frontier edits A sometimes and finds it. The loop is the real one
(git, results.tsv, journal) with test_workspace's synthetic harness, which times a file from its
tunables, and the model is tests/scripted_model.py's rule-driven endpoint, so each run takes a
second or two.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autokernel.agents.base import Attempt
from autokernel.agents.frontier import Frontier, frontier_key, parent_tag, tagged_parent
from autokernel.kernelfile import parse_kernel_source, set_tunables
from autokernel.loop.context import Briefing
from autokernel.loop.results import ResultsLog, read_rows
from autokernel.loop.workspace import FRONTIER_DIR, Workspace
from scripted_model import Reply, ScriptedModel, call, done, last_tool_results, tool_names
from test_claude_agent import make_context, sdk
from test_workspace import SOFTMAX, FakeBench, loop_config, make_plan, new_run, runner_for

MARK_A = "# STRUCTURE_A: each row in two passes\n"
MARK_B = "# STRUCTURE_B: the two passes share their loads\n"
STARTER = SOFTMAX  # 18 us under test_workspace.fake_latency
A = set_tunables(SOFTMAX.replace("def kernel_fn", MARK_A + "def kernel_fn"),
                 {"VARIANT": "two_pass"})  # 22 us
B = set_tunables(A.replace("def kernel_fn", MARK_B + "def kernel_fn"),
                 {"BLOCK_N": 1024, "NUM_WARPS": 8})  # 14 us
DRAFT_HEADING = "(your draft starts as this file)\n```python\n"
EXPERIMENTS = 8


def tweak(source: str) -> str:
    """A small edit that never beats the best: fewer warps."""
    return set_tunables(source, {"NUM_WARPS": 2})


def opening_of(request: dict[str, Any]) -> str:
    return "\n".join(b.get("text", "") for b in request["messages"][0]["content"])


def draft_in(request: dict[str, Any]) -> str:
    """The kernel the conversation's draft starts as, from its opening message."""
    opening = opening_of(request)
    start = opening.index(DRAFT_HEADING) + len(DRAFT_HEADING)
    return opening[start:opening.index("```", start)]


class CorpusModel:
    """The scripted model: A from the starter (the first time), B from A, else a tweak."""

    def __init__(self, bench: FakeBench | None = None) -> None:
        self.bench = bench
        self.wrote_a = False
        self.openings: list[str] = []
        self.parents: list[str] = []  # the kernel each conversation's draft started as
        self.benched_before: list[int] = []  # harness runs before each conversation began

    def __call__(self, request: dict[str, Any]) -> Reply:
        if not tool_names(request):  # a planning request, where the agent makes one
            return done("1. Try one structural change.")
        if last_tool_results(request):
            return done("Done.")
        self.openings.append(opening_of(request))
        self.benched_before.append(len(self.bench.calls) if self.bench else 0)
        parent = draft_in(request)
        self.parents.append(parent)
        if MARK_A in parent and MARK_B not in parent:
            source, what = B, "share the loads of the two passes"
        elif MARK_A not in parent and not self.wrote_a:
            self.wrote_a = True
            source, what = A, "split each row into two passes"
        else:
            source, what = tweak(parent), "fewer warps"
        return call("write_kernel", source=source, description=what,
                    hypothesis="the scripted corpus says so")


def claude(model: CorpusModel, **options: Any) -> Any:
    sdk()
    from autokernel.agents.claude import ClaudeAgent

    return ClaudeAgent(api_key="sk-ant-test", http_client=ScriptedModel(model).client(),
                       failure_backoff_s=0.0, sleep=lambda seconds: None, **options)


def run_loop(tmp_path: Path, **options: Any) -> tuple[Workspace, Any, list[dict[str, str]],
                                                      CorpusModel]:
    ws, state, plan = new_run(tmp_path, make_plan(("softmax",)))
    bench = FakeBench()
    model = CorpusModel(bench)
    agent = claude(model, **options)
    config = loop_config(max_consecutive_reverts=None, max_experiments=EXPERIMENTS)
    runner_for(ws, state, plan, agent, bench, config).run()
    return ws, agent, read_rows(ws.results_path), model


# -- the corpus: greedy chain against the frontier ---------------------------------------------


@pytest.mark.parametrize("greedy", [{"explore": 0.0}, {"frontier_size": 1}])
def test_the_greedy_chain_never_finds_what_lies_beyond_a_near_miss(
    tmp_path: Path, greedy: dict[str, Any]
) -> None:
    _, _, rows, model = run_loop(tmp_path, **{"explore": 0.5, "seed": 0, **greedy})
    assert len(rows) == EXPERIMENTS + 1
    assert rows[1]["description"] == "split each row into two passes"
    assert rows[1]["status"] == "revert" and float(rows[1]["latency_us"]) > 18.0  # a near-miss
    assert [r["status"] for r in rows[2:]] == ["revert"] * (EXPERIMENTS - 1)
    assert all(r["description"] == "fewer warps" for r in rows[2:])
    assert model.parents == [STARTER] * EXPERIMENTS  # it never edits A


def test_the_frontier_edits_the_near_miss_and_finds_the_faster_structure(tmp_path: Path) -> None:
    ws, agent, rows, model = run_loop(tmp_path)  # the agent's defaults: 4 entries, explore 0.25
    found = [r for r in rows if r["description"].endswith("share the loads of the two passes")]
    assert found, [r["description"] for r in rows]
    first = found[0]
    # Its parent is the near-miss of experiment 1, said in the row; it beat the global best.
    assert first["description"] == parent_tag(1) + "share the loads of the two passes"
    assert first["status"] == "keep" and float(first["latency_us"]) < 18.0
    assert ws.read_kernel() == B
    # The conversation that edited A was told so, and how A compares with the best.
    opening = next(o for o in model.openings if "Your parent: experiment 1" in o)
    assert "1.22x the current best" in opening and "not the best" in opening
    # The near-miss's source is kept for a resume, outside git's reach.
    assert (ws.root / FRONTIER_DIR / "0001.py").read_text() == A
    status = subprocess.run(["git", "-C", str(ws.root), "status", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
    assert status == ""


def test_a_resumed_run_rebuilds_the_same_frontier(tmp_path: Path) -> None:
    ws, agent, rows, _ = run_loop(tmp_path, explore=0.5, seed=0)
    plan = make_plan(("softmax",))
    from autokernel.loop.state import RunState

    state = RunState.load(ws.state_path)
    context = Briefing(ws, plan, loop_config()).context(
        state.targets[0], state.next_experiment, ResultsLog.open(ws.results_path))
    live = agent.frontier.sync(context)
    rebuilt = Frontier(size=4, explore=0.5, seed=0).sync(context)
    assert [(e.key, e.experiment, e.latency_us, e.picks) for e in rebuilt] == \
        [(e.key, e.experiment, e.latency_us, e.picks) for e in live]
    assert [e.source for e in rebuilt][:3] == [B, STARTER, A]  # the best, then by latency
    assert rebuilt[2].picks >= 1  # "[from exp 1]" in results.tsv counts for A
    # A workspace without frontier/ (older than the frontier) still has its kept kernels in git.
    for path in (ws.root / FRONTIER_DIR).iterdir():
        path.unlink()
    from_git = Frontier(size=4, explore=0.5, seed=0).sync(
        Briefing(ws, plan, loop_config()).context(
            state.targets[0], state.next_experiment, ResultsLog.open(ws.results_path)))
    kept = {int(r["experiment"]) for r in rows if r["status"] in ("keep", "baseline")}
    assert {e.experiment for e in from_git} <= kept
    assert STARTER in [e.source for e in from_git]


# -- --drafts -----------------------------------------------------------------------------------


def test_drafts_are_written_in_rounds_and_judged_one_experiment_each(tmp_path: Path) -> None:
    _, agent, rows, model = run_loop(tmp_path, drafts=3, explore=0.0)
    assert agent.drafts == 3
    assert len(rows) == EXPERIMENTS + 1 and [int(r["experiment"]) for r in rows] == \
        list(range(EXPERIMENTS + 1))
    # Three conversations before a harness run, three more after the next three runs...
    assert model.benched_before[:6] == [1, 1, 1, 4, 4, 4]
    assert all(r["agent"] == "claude" for r in rows[1:])
    # A later draft of a round is told what the earlier ones already try.
    assert "Drafted already this round" not in model.openings[0]
    assert "Drafted already this round" in model.openings[1]
    assert "split each row into two passes" in model.openings[1]


def test_drafts_of_a_target_the_loop_left_are_dropped() -> None:
    model = CorpusModel()
    agent = claude(model, drafts=2, explore=0.0)
    history = [Attempt(0, "baseline", "baseline", latency_us=18.0)]
    first = agent.propose(softmax_context(1, history))
    assert first.source == A and len(model.openings) == 2
    other = softmax_context(2, history)
    other.target = replace(other.target, rank=2)  # the loop moved on to another target
    agent.propose(other)
    assert len(model.openings) == 4  # the first target's queued draft was dropped


def softmax_context(experiment: int, history: list[Attempt]) -> Any:
    context = make_context(STARTER, experiment, list(history))
    context.target = replace(context.target, kernel_type="softmax")
    return context


# -- the frontier alone -------------------------------------------------------------------------

C = SOFTMAX.replace("def kernel_fn", "# STRUCTURE_C\ndef kernel_fn")
D = SOFTMAX.replace("def kernel_fn", "# STRUCTURE_D\ndef kernel_fn")


def corpus_history() -> list[Attempt]:
    return [
        Attempt(0, "baseline", "baseline", latency_us=18.0),
        Attempt(1, "A", "revert", latency_us=22.0),
        Attempt(2, "C", "revert", latency_us=25.0),
        Attempt(3, "D", "revert", latency_us=30.0),
        Attempt(4, "fewer warps", "revert", latency_us=20.0),  # the best's structure, retuned
        Attempt(5, "broken", "fail", stage="correctness"),
        Attempt(6, parent_tag(1) + "A retuned", "revert", latency_us=21.0),
    ]


def remembered(frontier: Frontier, workspace: str | None = None) -> Frontier:
    sources = {0: STARTER, 1: A, 2: C, 3: D, 4: tweak(STARTER), 5: "broken", 6: tweak(A)}
    for experiment, source in sources.items():
        frontier.remember(experiment, source, workspace)
    return frontier


def test_the_frontier_keeps_the_fastest_configuration_of_the_top_structures() -> None:
    frontier = remembered(Frontier(size=3))
    entries = frontier.sync(make_context(STARTER, 7, corpus_history()))
    # The best first; a retune of the best is not another structure; A at its faster retune.
    assert [(e.experiment, e.latency_us) for e in entries] == [(0, 18.0), (6, 21.0), (2, 25.0)]
    assert [e.key for e in entries] == [frontier_key(STARTER), frontier_key(A), frontier_key(C)]
    assert frontier_key(tweak(A)) == frontier_key(A) != frontier_key(C)
    # Picks: the untagged LLM attempts edited the best of their time, "[from exp 1]" edited A.
    assert [e.picks for e in entries] == [5, 1, 0]
    assert tagged_parent(parent_tag(12) + "x") == 12 and tagged_parent("tuner: x") is None


def test_the_pick_is_epsilon_greedy_deterministic_and_prefers_the_less_explored() -> None:
    def picks(explore: float, seed: int, size: int = 3) -> list[int]:
        frontier = remembered(Frontier(size=size, explore=explore, seed=seed))
        frontier.sync(make_context(STARTER, 7, corpus_history()))
        return [frontier.pick(7, slot).experiment for slot in range(12)]

    assert picks(0.0, 0) == [0] * 12 and picks(1.0, 0, size=1) == [0] * 12  # the greedy chain
    # Always exploring: C (never edited) first, then A and C by turns (the faster on a tie).
    assert picks(1.0, 0)[:4] == [2, 6, 2, 6]
    mixed = picks(0.5, 4)
    assert mixed == picks(0.5, 4)  # the same seed draws the same parents
    assert 0 in mixed and {2, 6} & set(mixed)
    assert mixed != picks(0.5, 5)
    frontier = remembered(Frontier(size=3, explore=1.0))
    frontier.sync(make_context(STARTER, 7, corpus_history()))
    parent = frontier.pick(7)
    assert not parent.is_best and parent.best_latency_us == 18.0 and "explore" in parent.why
    with pytest.raises(ValueError):
        Frontier(size=0)


def test_the_frontier_reads_its_sources_back_from_the_workspace(tmp_path: Path) -> None:
    remembered(Frontier(), str(tmp_path))
    assert (tmp_path / FRONTIER_DIR / "0001.py").read_text() == A
    context = make_context(STARTER, 7, corpus_history(), workspace=str(tmp_path))
    before = [(e.key, e.experiment, e.picks) for e in remembered(Frontier()).sync(context)]
    after = [(e.key, e.experiment, e.picks) for e in Frontier().sync(context)]  # a resume
    assert after == before and len(after) == 4
    assert parse_kernel_source(Frontier().sync(context)[1].source).tunables["NUM_WARPS"] == 2


# -- the option ---------------------------------------------------------------------------------


def test_drafts_is_a_claude_option_that_resume_keeps(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    sdk()
    from typer.testing import CliRunner

    from autokernel.cli import app
    from autokernel.pipeline.stages import make_run_agent

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    agent, name, _ = make_run_agent("claude", {}, saved_options={"drafts": 3, "seed": 2})
    assert name == "claude" and agent.drafts == 3 and agent.frontier.seed == 2
    model = tmp_path / "model.py"
    model.write_text("# the model\n")
    result = CliRunner().invoke(app, ["run", str(model), "--device", "cpu", "--drafts", "0",
                                      "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "--drafts must be at least 1" in result.output
