"""`--agent claude`: the LLM proposes structures, the tuner sweeps their tunables.

One LLM call per block size is waste: Helion's LLM-guided autotuning lets the model propose and a
model-based search refine. Here, whenever Claude's kernel passes the harness and declares a
TUNABLE_SPACE whose code differs from every structure swept before, the tuner (no LLM calls, a few
cheap harness runs) sweeps that structure's tunables before Claude is asked again. A new target
starts with a sweep of its starter, so Claude's first call already sees a tuned baseline.

A sweep runs on the structure's own source even when Claude's first configuration of it was
reverted (slower than the best): a structure is judged at its best configuration, and any sweep
candidate that beats the current best is kept by the loop as usual. The tuner sees only the
sweep's own experiments, so configurations measured on another structure never count as visited.
A sweep ends when the tuner reports the space exhausted, after `sweep_patience` experiments
without a better configuration of that structure, or after `max_sweep_experiments`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

from autokernel.agents.base import Agent, AgentContext, Proposal
from autokernel.agents.claude_prompt import TUNER_PREFIX
from autokernel.harness.result import BenchResult
from autokernel.kernelfile import KernelFileError, parse_kernel_source, set_tunables


def structure_key(source: str) -> str | None:
    """A hash of the code with every tunable's value blanked, or None without a TUNABLE_SPACE.

    Two files with the same key differ only in tunable values: one structure, one sweep.
    """
    try:
        info = parse_kernel_source(source)
        if not info.space:
            return None
        blanked = set_tunables(source, {name: None for name in info.space})
    except (KernelFileError, SyntaxError, ValueError):
        return None
    normalized = "\n".join(line.rstrip() for line in blanked.strip().splitlines())
    return hashlib.sha256(normalized.encode()).hexdigest()[:16]


@dataclass
class _Sweep:
    key: str
    source: str  # the structure being swept (its latest kept configuration once one is kept)
    experiments: set[int] = field(default_factory=set)  # this structure's measured experiments
    done: int = 0
    since_better: int = 0
    best_latency_us: float | None = None


@dataclass
class _TargetState:
    key: tuple[Any, ...]
    swept: set[str] = field(default_factory=set)
    sweep: _Sweep | None = None


class HybridAgent:
    """Claude for structural ideas, the tuner for their tunables. Used for `--agent claude`."""

    name = "claude"

    def __init__(
        self,
        llm: Agent,
        tuner: Agent,
        *,
        sweep_patience: int = 8,
        max_sweep_experiments: int = 24,
        initial_sweep: bool = True,
    ) -> None:
        self.llm = llm
        self.tuner = tuner
        self.sweep_patience = max(1, sweep_patience)
        self.max_sweep_experiments = max(1, max_sweep_experiments)
        self.initial_sweep = initial_sweep
        self._state: _TargetState | None = None
        self._pending: tuple[str, int, Proposal] | None = None  # (who, experiment, proposal)
        self.last_message = ""

    def __getattr__(self, name: str) -> Any:
        # Budget and usage reporting (total, model, budget_stop_reason...) belong to the LLM agent.
        if name in ("llm", "tuner"):
            raise AttributeError(name)
        return getattr(self.llm, name)

    # -- sweeps ---------------------------------------------------------------------------

    def _start_sweep(self, source: str, experiments: set[int]) -> None:
        key = structure_key(source)
        state = self._state
        if key is None or state is None or key in state.swept:
            return
        state.swept.add(key)
        state.sweep = _Sweep(key=key, source=source, experiments=set(experiments))

    def _sweep_proposal(self, context: AgentContext) -> Proposal | None:
        state = self._state
        sweep = state.sweep if state else None
        if sweep is None:
            return None
        if sweep.done >= self.max_sweep_experiments or sweep.since_better >= self.sweep_patience:
            state.sweep = None  # type: ignore[union-attr]
            return None
        own_history = [a for a in context.history if a.experiment in sweep.experiments]
        proposal = self.tuner.propose(
            replace(context, best_source=sweep.source, history=own_history)
        )
        if proposal is None:
            state.sweep = None  # type: ignore[union-attr]
            return None
        proposal.agent = getattr(self.tuner, "name", "tuner")
        proposal.sweep = True
        return proposal

    def _begin_target(self, context: AgentContext) -> None:
        key = (context.target.rank, context.target.kernel_type)
        if self._state is not None and self._state.key == key:
            return
        self._state = _TargetState(key=key)
        # After a resume the history may already hold Claude's work; sweep the starter only on a
        # target that has seen nothing but its baseline and tuner configurations.
        untouched = all(
            a.status == "baseline" or a.description.startswith(TUNER_PREFIX)
            for a in context.history
        )
        if self.initial_sweep and untouched:
            self._start_sweep(context.best_source, {a.experiment for a in context.history})

    # -- Agent protocol -------------------------------------------------------------------

    def propose(self, context: AgentContext) -> Proposal | None:
        self._begin_target(context)
        proposal = self._sweep_proposal(context)
        who = "tuner"
        if proposal is None:
            proposal = self.llm.propose(context)  # AgentStop propagates: the run ends cleanly
            who = "llm"
            if proposal is None:
                self.last_message = getattr(self.llm, "last_message", "")
                return None
        self._pending = (who, context.experiment, proposal)
        return proposal

    def observe(self, proposal: Proposal, result: BenchResult, kept: bool) -> None:
        pending, self._pending = self._pending, None
        if pending is None or pending[2] is not proposal:
            return
        who, experiment, _ = pending
        latency = result.latency_us if result.passed else None
        if who == "tuner":
            self.tuner.observe(proposal, result, kept)
            sweep = self._state.sweep if self._state else None
            if sweep is None:
                return
            sweep.experiments.add(experiment)
            sweep.done += 1
            if latency is not None and (
                sweep.best_latency_us is None or latency < sweep.best_latency_us
            ):
                sweep.best_latency_us = latency
                sweep.since_better = 0
            else:
                sweep.since_better += 1
            if kept:
                sweep.source = proposal.source
            return
        self.llm.observe(proposal, result, kept)
        if not proposal.error and result.passed:
            self._start_sweep(proposal.source, {experiment})
            if self._state is not None and self._state.sweep is not None:
                self._state.sweep.best_latency_us = latency
