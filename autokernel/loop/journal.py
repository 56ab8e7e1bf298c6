"""The experiment journal: every step that changes the workspace is written to state.json first,
so that a kill at any point leaves a state `autokernel.loop.repair` can finish or undo.

One experiment, by its journal phase (`InFlight.phase`):

    written      the candidate is in kernel.py; the harness has not judged it yet
    benchmarked  the verdict is journaled; a keep is then committed
    committed    the keep's commit is journaled

then the row is appended to results.tsv and its entry to the target's lessons.md (each once, also
when resume finishes the experiment), a non-keep resets the tree to the last kept commit, and
one atomic state write updates the target's figures, clears the journal and advances the
experiment counter. A target's end ("finishing") and a revisit's start ("reopening") are journaled
the same way, by the target's status, before their commit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autokernel.agents.base import Proposal
from autokernel.harness.result import BenchResult
from autokernel.loop.attempts import record_attempt
from autokernel.loop.config import LoopConfig
from autokernel.loop.context import Briefing
from autokernel.loop.dashboard import Dashboard, target_summary
from autokernel.loop.judge import Judge
from autokernel.loop.lessons import record_lesson
from autokernel.loop.keep_figure import KeepChain
from autokernel.loop.measure import measure
from autokernel.loop.results import (COMMITTED_STATUSES, COUNTED_PHASE, ResultRow, ResultsLog,
                                     sanitize)
from autokernel.loop.rows import commit_message, fields_of_flight, result_row, tunables_of
from autokernel.loop.schedule import note_stop, position_of
from autokernel.loop.state import InFlight, RunState, TargetState
from autokernel.loop.timekeeping import TimeAccounts
from autokernel.loop.workspace import KERNEL_FILE, KERNELS_DIR, Workspace
from autokernel.orchestrate import Decision
from autokernel.profiling.plan import Plan


class RunInconsistent(RuntimeError):
    """The workspace cannot be brought back to a state consistent with results.tsv."""


class Journal:
    """Carries experiments and target transitions through their journaled steps."""

    def __init__(self, workspace: Workspace, plan: Plan, state: RunState, config: LoopConfig,
                 *, accounts: TimeAccounts, dashboard: Dashboard, briefing: Briefing,
                 bench: Callable[..., BenchResult] | None, clock: Callable[[], float]) -> None:
        self.ws = workspace
        self.plan = plan
        self.state = state
        self.config = config
        self.accounts = accounts
        self.dashboard = dashboard
        self.briefing = briefing
        self.clock = clock
        self.results = ResultsLog(workspace.results_path)
        self.judge = Judge(workspace, plan, config, bench, best_source=self.best_source)
        self.last_result: BenchResult | None = None  # of the last experiment concluded

    def save(self) -> None:
        self.accounts.tick()
        self.state.save(self.ws.state_path)

    def best_source(self, target: TargetState) -> str:
        commit = target.best_commit or (target.best.commit if target.best else None)
        if commit is None:
            raise RunInconsistent(f"target {target.tag} has no committed kernel to continue from")
        return self.ws.file_at(commit, KERNEL_FILE)

    # -- one experiment -------------------------------------------------------------------------
    def start(self, target: TargetState, proposal: Proposal, fields: dict[str, Any], *,
              baseline: bool, spent_before: float = 0.0) -> InFlight:
        """Journal the candidate, write it to kernel.py and take it to the end; the finished
        journal entry (its verdict) is returned."""
        flight = InFlight(
            experiment=self.state.next_experiment,
            target=position_of(self.state, target),
            phase="written",
            source=proposal.source,
            baseline=baseline,
            tunables=tunables_of(proposal.source),
            bench_attempts=1,
            seconds_before=spent_before,
            **fields,
        )
        self.state.in_flight = flight
        self.save()
        self.ws.write_kernel(proposal.source)
        self.continue_in_flight()
        return flight

    def record_agent_failure(self, target: TargetState, fields: dict[str, Any], error: str,
                             seconds: float) -> None:
        """A proposal without a kernel: a failed experiment with no harness run, journaled like
        any other so that a kill between the row and the state write cannot count it twice."""
        self.state.in_flight = InFlight(
            experiment=self.state.next_experiment, target=position_of(self.state, target),
            phase="benchmarked", source="", verdict="fail", verdict_reason=sanitize(error),
            seconds_before=seconds, **fields,
        )
        self.save()
        self.continue_in_flight()

    def continue_in_flight(self) -> None:
        """Take the journaled experiment from its phase to the end (also used by repair)."""
        flight = self.state.in_flight
        assert flight is not None
        target = self.state.targets[flight.target]
        started = self.clock()
        if flight.phase == "written":
            # The harness runs candidates in their own session: a Ctrl-C in the terminal reaches
            # only this process, so the verdict below is the kernel's, also when stopping.
            result, decision = self.judge.verdict(target, flight)
            flight.result = result.to_dict()
            flight.verdict, flight.verdict_reason = decision.status, decision.reason
            if decision.vs_best is not None:
                flight.vs_best = [decision.vs_best.estimate, decision.vs_best.low,
                                  decision.vs_best.high]
            flight.seconds_before += self.clock() - started
            started = self.clock()
            flight.phase = "benchmarked"
            self.save()
        # None: the agent produced no kernel, so no harness ran.
        result = BenchResult.from_dict(flight.result) if flight.result else None
        weights = self.judge.weights(target)
        if flight.phase == "benchmarked" and flight.verdict in COMMITTED_STATUSES:
            assert result is not None
            # (No kernel.py yet: a verdict judged elsewhere, autokernel.parallel, before any keep.)
            if not self.ws.kernel_path.is_file() or self.ws.read_kernel() != flight.source:
                self.ws.write_kernel(flight.source)
            flight.commit = self.ws.commit_paths(
                commit_message(target, flight, result), [KERNEL_FILE])
            flight.phase = "committed"
            self.save()
        seconds = flight.seconds_before + (self.clock() - started)
        row = result_row(target, self.judge.plan_target(target), flight.experiment,
                         fields_of_flight(flight), result, flight.verdict or "fail",
                         flight.verdict_reason, commit=flight.commit or "", seconds=seconds,
                         stage=(result.stage or "") if result is not None else "agent",
                         tunables=flight.tunables, weights=weights, vs_best=flight.vs_best,
                         gpu=flight.gpu)
        if not self.results.has(flight.experiment):
            if flight.result:
                self.ws.write_verdict(flight.experiment, flight.result)
            self.results.append(row)
        record_lesson(self.ws.lessons_path(target.tag), row,  # once per experiment, also on resume
                      self.briefing.history_of(target, self.results), lesson=flight.lesson)
        record_attempt(self.ws.root, flight.experiment, flight.source, flight.verdict,
                       flight.verdict_reason, result)  # attempts/NNNN: a failure's full error
        if flight.verdict not in COMMITTED_STATUSES:
            self.ws.reset_to(self.state.head)
        self.last_result = result
        self._conclude(target, flight.experiment, row, result)

    def _conclude(self, target: TargetState, experiment: int, row: ResultRow,
                  result: BenchResult | None) -> None:
        """Update the target's figures, clear the journal, and advance: one atomic write."""
        status = row.status
        weights = self.judge.weights(target)
        if status == "baseline":
            m = measure(result, experiment, row.commit, weights) if result is not None else None
            if m is not None:
                m.gpu = row.gpu
            target.baseline = m
            target.best = m if m is not None and m.passed else None
            target.best_commit = row.commit
            target.timing_meaningful = self.config.device != "cpu" and (
                result is None or result.timing_meaningful)
            self.state.head = row.commit
            target.best_result = result.to_dict() if result is not None and result.passed \
                else None
        else:
            target.experiments += 1
            if status == "keep":
                target.keeps += 1
                target.visit_keeps += 1
                target.consecutive_reverts = 0
                target.best = measure(result, experiment, row.commit, weights) if result else None
                if target.best is not None:
                    target.best.gpu = row.gpu
                target.best_commit = row.commit
                self.state.head = row.commit
                target.best_result = result.to_dict() if result is not None else None
            elif row.phase == COUNTED_PHASE:  # a sweep step is part of one idea, not an idea
                target.consecutive_reverts += 1  # that failed; an API error judged nothing
        target.input_tokens += row.input_tokens
        target.output_tokens += row.output_tokens
        target.cost_usd += row.cost_usd or 0.0
        self.state.in_flight = None
        self.state.next_experiment = experiment + 1
        self.save()
        self.briefing.remember(target, row, self.results)
        self.dashboard.experiment(self.state, target, row)

    def abort_in_flight(self) -> None:
        """Second Ctrl-C: drop an experiment that has not been benchmarked yet."""
        flight = self.state.in_flight
        if flight is None or flight.phase != "written":
            return  # later phases are finished by `resume` from the journal
        self.state.in_flight = None
        try:
            self.ws.reset_to(self.state.head)
        except Exception:  # resume's repair resets the tree anyway
            pass

    # -- a target's end and a revisit's start ---------------------------------------------------
    def finish_target(self, target: TargetState, decision: Decision) -> None:
        target.status = "finishing"
        note_stop(self.state, target, decision)
        self.save()
        self.complete_finish(target)

    def complete_finish(self, target: TargetState) -> None:
        """Save the best kernel under kernels/ and commit the target's end."""
        best = target.best
        paths: list[str] = []
        if best is not None and best.passed:
            relative = f"{KERNELS_DIR}/{target.tag}.py"
            (self.ws.root / relative).parent.mkdir(exist_ok=True)
            # The target's best from its commit: with targets in parallel (autokernel.parallel)
            # kernel.py holds whichever target was committed last.
            (self.ws.root / relative).write_text(self.best_source(target), encoding="utf-8")
            target.kernel_file = relative
            paths.append(relative)
        summary = "no passing kernel"
        if best is not None and best.passed:
            level = KeepChain.of_rows(r for r in self.results.rows() if r["tag"] == target.tag)
            summary = target_summary(target, level.level(target.tag))
        commit = self.ws.commit_paths(
            sanitize(f"finish {target.tag}: {summary} — {target.stop_reason}", 300),
            paths or [KERNEL_FILE],
        )
        self.state.head = commit
        target.status = "done"
        self.state.current = None
        self.save()
        self.dashboard.target_finished(self.state, target)

    def reopen(self, target: TargetState) -> None:
        """Put a revisited target's best kernel back into kernel.py, as a commit."""
        target.status = "reopening"
        self.save()
        source = self.best_source(target)
        self.ws.write_kernel(source)
        commit = self.ws.commit_paths(
            f"revisit {target.tag}: continue from its best, exp "
            f"{target.best.experiment if target.best else target.baseline.experiment}",
            [KERNEL_FILE],
        )
        self.complete_reopen(target, commit)

    def complete_reopen(self, target: TargetState, commit: str) -> None:
        target.status = "active"
        target.best_commit = commit
        self.state.head = commit
        self.save()
