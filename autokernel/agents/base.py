"""The one interface every agent implements, so the loop treats `tuner` and `claude` alike.

Per experiment the loop calls `propose(context)`; the agent returns the full new text of
`kernel.py` (the loop writes it, runs the harness, keeps or reverts) or None when it has nothing
left worth trying on this target. The loop then calls `observe` with the verdict, so the agent
learns from its own results.

Two outcomes are not candidates:
- a Proposal with `error` set: the agent tried and produced no kernel this time (an LLM reply
  without a kernel, an API failure after retries). The loop records a failed experiment (no
  harness run) and asks again; this is NOT "search exhausted".
- `AgentStop` raised from `propose`: the agent cannot go on (its cost or call budget is spent, the
  API refuses the key, too many failures in a row). The loop ends the run cleanly: results.tsv
  consistent, report written, the message shown to the user.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from autokernel.harness.result import BenchResult
from autokernel.profiling.plan import Target


MAX_SUGGESTED_CONFIGS = 5


@dataclass
class Attempt:
    """A compact line of history: what was tried on this target and how it went."""

    experiment: int
    description: str
    status: str  # keep | revert | fail | crash | timeout | rejected | baseline
    latency_us: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    stage: str | None = None
    reason: str = ""
    tunables: dict[str, Any] = field(default_factory=dict)
    launch_digest: str = ""  # same digest: the same launches at the primary shape (results.py)
    hypothesis: str = ""  # the agent's reason for trying it (results.tsv keeps it across resume)


@dataclass
class ParentKernel:
    """The kernel an LLM experiment edits: the current best, or another passing structure of the
    target's frontier (a near-miss, autokernel.agents.frontier). Its child is judged against the
    current best like any candidate."""

    experiment: int  # the experiment that measured it
    source: str
    latency_us: float | None
    why: str  # why it was picked, in words for the prompt
    is_best: bool = True
    best_latency_us: float | None = None  # the current best's, for the comparison


@dataclass
class AgentContext:
    target: Target
    device: str
    gpu_summary: str  # GPU name, ceilings, where the current best sits on the roofline
    best_source: str  # the current best kernel.py
    reference_source: str  # the oracle's source for this kernel type
    history: list[Attempt]
    best: BenchResult | None  # harness verdict of the current best
    experiment: int  # number of the experiment about to run
    workspace: str | None = None  # the run's workspace directory, readable by LLM agents
    parent: ParentKernel | None = None  # what the LLM edits; None: best_source (set by the agent)
    # This round's drafts already written, not yet measured (--drafts): propose something else.
    sibling_drafts: list[str] = field(default_factory=list)
    lessons: str = ""  # the target's lessons.md, bounded, most informative entries first


@dataclass
class Proposal:
    source: str  # the whole new kernel.py
    description: str  # one line, goes into results.tsv and the commit message
    hypothesis: str = ""
    # What the agent says this experiment or the history taught it, for the target's lessons.md.
    lesson: str = ""
    tunables: dict[str, Any] = field(default_factory=dict)
    # Tokens summed over the LLM calls behind this proposal. input_tokens counts every prompt
    # token (cache reads and writes included); the cache_* fields break it down.
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0  # None: tokens were spent but the model's price is unknown
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    llm_calls: int = 0
    agent: str = ""  # which agent produced it, for agents that combine others ("" = Agent.name)
    error: str = ""  # set: no candidate this time (see module docstring); source is unused
    # A cheap follow-up of an earlier proposal (the claude agent's tuner sweep of the tunables of
    # a structure the LLM just proposed): one idea, so the plateau rule does not count it.
    sweep: bool = False
    # Configurations of this proposal's TUNABLE_SPACE the LLM expects to be good (at most
    # MAX_SUGGESTED_CONFIGS, each a subset of the tunables): the tuner's sweep starts from them.
    suggested_configs: list[dict[str, Any]] = field(default_factory=list)
    # The draft checks (the claude agent's compile_kernel / test_kernel) behind this proposal:
    # calls made and seconds spent, already inside the experiment's time.
    check_calls: int = 0
    check_seconds: float = 0.0


class AgentStop(Exception):
    """The agent cannot continue; the loop ends the run cleanly and shows this message."""


class Agent(Protocol):
    name: str

    def propose(self, context: AgentContext) -> Proposal | None: ...

    def observe(self, proposal: Proposal, result: BenchResult, kept: bool) -> None: ...
