"""The one interface every agent implements, so the loop treats `tuner` and `claude` alike.

Per experiment the loop calls `propose(context)`; the agent returns the full new text of
`kernel.py` (the loop writes it, runs the harness, keeps or reverts) or None when it has nothing
left worth trying on this target. The loop then calls `observe` with the verdict, so the agent
learns from its own results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from autokernel.harness.result import BenchResult
from autokernel.profiling.plan import Target


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


@dataclass
class Proposal:
    source: str  # the whole new kernel.py
    description: str  # one line, goes into results.tsv and the commit message
    hypothesis: str = ""
    tunables: dict[str, Any] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


class Agent(Protocol):
    name: str

    def propose(self, context: AgentContext) -> Proposal | None: ...

    def observe(self, proposal: Proposal, result: BenchResult, kept: bool) -> None: ...
