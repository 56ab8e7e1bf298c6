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

Each sweep is seeded (autokernel.agents.tuner_seeds): the configurations Claude suggested with its
kernel (`Proposal.suggested_configs`) and the results of the structures swept before on this target,
which warm-start the tuner's surrogate (where their tunables carry over); the tuner's initial design
takes turns between the suggestions, the surrogate's picks and the starter's neighbours. A sweep
ends when the tuner reports the space exhausted, when it stalls (`sweep_patience` measurements in a
row without improving its best by `sweep_min_gain`), or after `max_sweep_experiments`; the reason is
shown once.

When the LLM cannot go on for any reason but a spent budget (the API keeps failing, refuses the
key, Claude writes no kernel experiment after experiment: its `AgentStop`), the run does not end:
the hybrid says so once and the tuner carries on alone on the current best for the rest of the run,
under the loop's usual plateau rules. A spent `--max-cost`/`--max-llm-calls` still ends the run,
as the user's cap on the night (`autokernel resume --agent tuner` goes on for free).
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass, field, replace
from typing import Any

from autokernel.agents.base import Agent, AgentContext, AgentStop, Attempt, Proposal
from autokernel.agents.claude_prompt import TUNER_PREFIX
from autokernel.agents.tuner import TunerAgent
from autokernel.agents.tuner_seeds import PriorResult, SweepSeeds
from autokernel.harness.result import BenchResult
from autokernel.kernelfile import KernelFileError, parse_kernel_source, set_tunables
from autokernel.loop.results import FAILED_STATUSES


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
    suggested: list[dict[str, Any]] = field(default_factory=list)  # the LLM's, measured first
    seeds: SweepSeeds | None = None  # built at the sweep's first proposal, then kept
    done: int = 0


@dataclass
class _TargetState:
    key: tuple[Any, ...]
    swept: set[str] = field(default_factory=set)
    sweep: _Sweep | None = None
    finished: list[_Sweep] = field(default_factory=list)  # the warm start of the next sweeps


class HybridAgent:
    """Claude for structural ideas, the tuner for their tunables. Used for `--agent claude`."""

    name = "claude"

    def __init__(
        self,
        llm: Agent,
        tuner: TunerAgent,
        *,
        sweep_patience: int = 8,
        sweep_min_gain: float = 0.01,
        max_sweep_experiments: int = 24,
        initial_sweep: bool = True,
        structure_sweeps: bool = True,
    ) -> None:
        self.llm = llm
        self.tuner = tuner
        self.sweep_patience = max(1, sweep_patience)
        self.sweep_min_gain = sweep_min_gain
        self.max_sweep_experiments = max(1, max_sweep_experiments)
        # False: Claude alone (`tuner_sweeps=False`); the tuner only takes over if the LLM stops.
        self.structure_sweeps = structure_sweeps
        self.initial_sweep = initial_sweep and structure_sweeps
        self._state: _TargetState | None = None
        # (who, experiment) of each proposal handed out and not observed yet, by its id: with
        # --gpus several are judged at once (autokernel.parallel), observed in any order.
        self._pending: dict[int, tuple[str, int, Proposal]] = {}
        self.last_message = ""
        self.handover_note = ""  # set once the tuner carries on alone: the run's end says it
        self._notices: list[str] = []

    def __getattr__(self, name: str) -> Any:
        # Budget and usage reporting (total, model, budget_stop_reason...) belong to the LLM agent.
        if name in ("llm", "tuner", "handover_note", "_notices"):
            raise AttributeError(name)
        return getattr(self.llm, name)

    # -- sweeps ---------------------------------------------------------------------------

    def take_notice(self) -> str:
        """What the loop should show once (a sweep's end, the handover), '' when nothing new."""
        notices, self._notices = self._notices, []
        return "; ".join(notices)

    def _start_sweep(self, source: str, experiments: set[int],
                     suggested: list[dict[str, Any]] | None = None) -> None:
        key = structure_key(source)
        state = self._state
        if not self.structure_sweeps or key is None or state is None or key in state.swept:
            return
        state.swept.add(key)
        state.sweep = _Sweep(key=key, source=source, experiments=set(experiments),
                             suggested=list(suggested or []))

    def _seeds(self, sweep: _Sweep, history: list[Attempt]) -> SweepSeeds:
        """The LLM's suggestions and every earlier sweep's results on this target."""
        earlier = {e: done.key for done in self._state.finished  # type: ignore[union-attr]
                   for e in done.experiments}
        prior = [
            PriorResult(a.tunables, None if a.status in FAILED_STATUSES else a.latency_us,
                        structure=earlier[a.experiment])
            for a in history
            if a.experiment in earlier and a.tunables
            and (a.status in FAILED_STATUSES or (a.latency_us or 0) > 0)
        ]
        return SweepSeeds(suggested=sweep.suggested, prior=prior,
                          stall_after=self.sweep_patience, min_gain=self.sweep_min_gain)

    def _end_sweep(self, why: str) -> None:
        state = self._state
        if state is None or state.sweep is None:
            return
        state.finished.append(state.sweep)
        state.sweep = None
        self._notices.append(f"tuner sweep of a structure ended: {why}")

    def _sweep_proposal(self, context: AgentContext) -> Proposal | None:
        state = self._state
        sweep = state.sweep if state else None
        if sweep is None:
            return None
        if sweep.done >= self.max_sweep_experiments:
            self._end_sweep(f"{sweep.done} experiments, the most a sweep may take")
            return None
        own_history = [a for a in context.history if a.experiment in sweep.experiments]
        if sweep.seeds is None:
            sweep.seeds = self._seeds(sweep, context.history)
        proposal = self.tuner.propose(
            replace(context, best_source=sweep.source, history=own_history), seeds=sweep.seeds
        )
        if proposal is None:
            self._end_sweep(self.tuner.last_message or "nothing left to try")
            return None
        proposal.agent = getattr(self.tuner, "name", "tuner")
        proposal.sweep = True
        return proposal

    # -- the handover to the tuner ------------------------------------------------------------

    def _hand_over(self, stop: AgentStop, experiment: int) -> None:
        why = str(stop).split("; stopping")[0]
        self.handover_note = (f"the LLM was handed over to the tuner at experiment {experiment} "
                              f"({why})")
        self._notices.append(
            f"the LLM agent cannot go on ({why}); the offline tuner carries on alone for the rest "
            "of the run (no more LLM calls)"
        )
        if self._state is not None and self._state.sweep is not None:
            self._end_sweep("the tuner now works alone")

    def _tuner_alone(self, context: AgentContext) -> Proposal | None:
        proposal = self.tuner.propose(context)  # the usual tuner, on the current best
        if proposal is None:
            self.last_message = self.tuner.last_message
            return None
        proposal.agent = getattr(self.tuner, "name", "tuner")
        self._pending[id(proposal)] = ("alone", context.experiment, proposal)
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
        if self.handover_note:
            return self._tuner_alone(context)
        proposal = self._sweep_proposal(context)
        who = "tuner"
        if proposal is None:
            try:
                proposal = self.llm.propose(context)
            except AgentStop as stop:
                if _budget_spent(self.llm, stop) or importlib.util.find_spec("sklearn") is None:
                    raise  # the user's cap on the night (or no tuner here): the run ends cleanly
                self._hand_over(stop, context.experiment)
                return self._tuner_alone(context)
            who = "llm"
            if proposal is None:
                self.last_message = getattr(self.llm, "last_message", "")
                return None
        self._pending[id(proposal)] = (who, context.experiment, proposal)
        return proposal

    def observe(self, proposal: Proposal, result: BenchResult, kept: bool) -> None:
        pending = self._pending.pop(id(proposal), None)
        if pending is None or pending[2] is not proposal:
            return
        who, experiment, _ = pending
        if who == "alone":
            self.tuner.observe(proposal, result, kept)
            return
        if who == "tuner":
            self.tuner.observe(proposal, result, kept)
            if result.passed:  # the LLM's frontier edits a structure at its fastest configuration
                getattr(self.llm, "remember_source", lambda *_: None)(experiment, proposal.source)
            sweep = self._state.sweep if self._state else None
            if sweep is None:
                return
            sweep.experiments.add(experiment)
            sweep.done += 1
            if kept:
                sweep.source = proposal.source
            return
        self.llm.observe(proposal, result, kept)
        if not proposal.error and result.passed:
            self._start_sweep(proposal.source, {experiment}, proposal.suggested_configs)


def _budget_spent(llm: Agent, stop: AgentStop) -> bool:
    """Whether the LLM stopped because its --max-cost/--max-llm-calls cap is reached."""
    spent = getattr(llm, "budget_stop_reason", None)
    return bool(spent and spent()) or str(stop).startswith(("--max-cost", "--max-llm-calls"))
