"""The experiment loop: targets in Amdahl order, one agent edit of kernel.py per experiment.

A run, as `Runner.run` tells it:

    take the run lock, catch Ctrl-C (`signals`), repair whatever a crash left (`repair`)
    until a stop rule, the time budget (`timekeeping`) or the user ends it:
        pick the target (`schedule`: Amdahl order, then revisit rounds while time is left)
        its first experiment is its starter, committed as the baseline
        `orchestrate.should_move_on` decides whether the target is done; a finished target's
        best kernel.py is saved under kernels/ and committed
        otherwise one experiment: the agent proposes a whole new kernel.py from its context
        (`context`); the journal (`journal`) writes it, has it judged (`judge`: the harness,
        then the keep rule on the figures of `measure`), commits a keep, appends the row
        (`rows`) to results.tsv and resets a non-keep to the last kept commit

Resume is the same story: `repair` first finishes or undoes the journaled step a kill
interrupted, using state.json, results.tsv and the branch (see autokernel.loop.state).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from autokernel.agents.base import Agent, AgentStop, Proposal
from autokernel.harness.result import BenchResult
from autokernel.loop import repair as crash_repair
from autokernel.loop.config import CPU_LOOP_NOTE, LoopConfig
from autokernel.loop.context import Briefing
from autokernel.loop.dashboard import Dashboard, PlainDashboard
from autokernel.loop.journal import Journal
from autokernel.loop.rows import proposal_fields
from autokernel.loop.schedule import (
    begin_visit, current_target, move_on_record, pending_targets, queue_revisits,
)
from autokernel.loop.signals import StopSignals
from autokernel.loop.state import RunState, TargetState
from autokernel.loop.timekeeping import TimeAccounts
from autokernel.loop.workspace import RunLock, Workspace
from autokernel.orchestrate import Decision, should_move_on
from autokernel.profiling.plan import Plan


class Runner:
    """Drives one workspace until every target is done, time is up, or the user stops it."""

    def __init__(
        self,
        workspace: Workspace,
        plan: Plan,
        state: RunState,
        config: LoopConfig,
        agent: Agent,
        *,
        bench: Callable[..., BenchResult] | None = None,
        dashboard: Dashboard | None = None,
        clock: Callable[[], float] = time.monotonic,
        starter_source: Callable[[str], str] | None = None,
        cuda_starter_source: Callable[[str], str | None] | None = None,
    ) -> None:
        self.ws = workspace
        self.plan = plan
        self.state = state
        self.config = config
        self.agent = agent
        self.clock = clock
        self.starter_source = starter_source or _packaged_starter
        self.cuda_starter_source = cuda_starter_source or _packaged_cuda_starter
        self.accounts = TimeAccounts(state, clock)
        self.journal = Journal(workspace, plan, state, config, accounts=self.accounts,
                               dashboard=dashboard or PlainDashboard(),
                               briefing=Briefing(workspace, plan, config), bench=bench,
                               clock=clock)
        self.signals = StopSignals(on_first=lambda: self.dashboard.message(
            "stopping after the current experiment (Ctrl-C again to abort it now)"))
        self.stop_message = ""

    @property
    def dashboard(self) -> Dashboard:
        return self.journal.dashboard

    @dashboard.setter
    def dashboard(self, dashboard: Dashboard) -> None:
        self.journal.dashboard = dashboard

    def run(self) -> str:
        """Run until done; return the reason the loop stopped (also kept in state.json)."""
        lock = RunLock(self.ws)
        lock.acquire()
        self.signals.install()
        self.dashboard.start(self.state)
        try:
            if self.config.device == "cpu":
                self.dashboard.message(CPU_LOOP_NOTE)
            self.repair()
            return self._loop()
        except KeyboardInterrupt:
            self.journal.abort_in_flight()
            return self._stop("aborted by a second Ctrl-C; the experiment in progress was "
                              "discarded and the tree reset to the last kept commit")
        finally:
            self.journal.save()
            self.dashboard.stop()
            self.signals.restore()
            lock.release()

    def repair(self) -> None:
        """Bring the workspace back to a consistent state after any interruption."""
        crash_repair.repair(self.journal)

    def check_consistency(self) -> None:
        crash_repair.check_consistency(self.journal)

    def extend_hours(self, hours: float) -> None:
        """A new time budget for the whole run (resume --hours): the target in progress gets its
        share of the new remaining time."""
        self.config.hours = hours
        self.accounts.extend_hours(hours)

    def _loop(self) -> str:
        while True:
            if self.signals.requested:
                # The one resume hint is the end-of-run summary's (autokernel.loop.summary).
                return self._stop("interrupted")
            target = current_target(self.state)
            if self.accounts.out_of_time():
                if target is not None:
                    self.journal.finish_target(target, Decision(
                        True, "hours", f"hours: the run's {self.state.hours:g} h are spent"))
                return self._finish_run(f"the run's time budget ({self.state.hours:g} h) is spent")
            if target is None:
                target = self._open_next_target()
                if target is None:
                    return self._finish_run("every target is done")
                continue
            if target.baseline is None:
                self._run_baseline(target)
                continue
            if self._cuda_trial_due(target):
                self._run_cuda_trial(target)
                continue
            decision = should_move_on(move_on_record(target), self.config.move_on)
            if decision.move_on:
                self.journal.finish_target(target, decision)
                continue
            try:
                self._run_agent_experiment(target)
            except AgentStop as exc:
                self.journal.finish_target(target, Decision(True, "stopped", f"stopped: {exc}"))
                return self._finish_run(f"the agent stopped: {exc}")

    def _stop(self, reason: str) -> str:
        """Record why the run stopped; the caller says it once, in the end-of-run summary."""
        handover = getattr(self.agent, "handover_note", "")  # the LLM gave way to the tuner
        if isinstance(handover, str) and handover:
            reason = f"{reason}; {handover}"
        self.state.stop_reason = reason
        self.stop_message = reason
        return reason

    def _finish_run(self, reason: str) -> str:
        self.state.finished = True
        self.state.current = None
        return self._stop(reason)

    def _open_next_target(self) -> TargetState | None:
        self.accounts.tick()
        if not pending_targets(self.state):
            revisits = queue_revisits(self.state, self.config)
            if not revisits:
                return None
            self.dashboard.message(f"revisit round {self.state.visit_round}: "
                                   f"{', '.join(t.tag for t in revisits)}")
        pending = pending_targets(self.state)
        target = pending[0]
        begin_visit(self.state, target, self.accounts.visit_budget(len(pending)))
        if target.visits == 1:
            target.status = "active"
            self.journal.save()
        else:
            self.journal.reopen(target)
        self.dashboard.target_started(self.state, target)
        return target

    def _starter(self, target: TargetState) -> tuple[str, str]:
        """The target's starter source and its description, by --backend."""
        kernel_type = target.kernel_type
        if self.config.backend == "cuda":
            source = self.cuda_starter_source(kernel_type)
            if source is not None:
                return source, f"baseline: the {kernel_type} CUDA starter"
            self.dashboard.message(f"{target.tag}: no CUDA starter for {kernel_type}; it starts "
                                   "from its Triton starter")
        return self.starter_source(kernel_type), f"baseline: the {kernel_type} starter"

    def _cuda_trial_due(self, target: TargetState) -> bool:
        """--backend auto: the CUDA starter is tried once per target, right after a passing
        Triton baseline, on a GPU, where the type has one."""
        return (self.config.backend == "auto" and self.config.device == "cuda"
                and not target.cuda_starter_tried and target.baseline is not None
                and target.best is not None)

    def _run_cuda_trial(self, target: TargetState) -> None:
        target.cuda_starter_tried = True  # once, even if the trial is interrupted
        self.journal.save()
        source = self.cuda_starter_source(target.kernel_type)
        if source is None:
            return
        proposal = Proposal(source=source, agent="starter", description=(
            f"the {target.kernel_type} CUDA starter (--backend auto: kept only where it beats "
            "the Triton kernel)"))
        self._experiment(target, proposal, baseline=False, agent_name="starter")

    def _run_baseline(self, target: TargetState) -> None:
        try:
            source, description = self._starter(target)
        except (FileNotFoundError, KeyError, NotImplementedError) as exc:
            target.status = "done"
            target.stop_rule, target.stop_reason = "no-starter", f"no starter kernel: {exc}"
            self.state.current = None
            self.journal.save()
            self.dashboard.message(f"skipping {target.tag}: {target.stop_reason}")
            return
        proposal = Proposal(source=source, description=description, agent="starter")
        self._experiment(target, proposal, baseline=True)
        failed = self.journal.last_result
        if (target.baseline is not None and failed is not None and not failed.passed
                and failed.stage == "harness"):
            # The harness itself cannot judge this target (e.g. a shape or dtype it refuses):
            # every experiment would fail the same way.
            self.journal.finish_target(target, Decision(True, "harness-error",
                                                        f"harness-error: {failed.reason}"))

    def _run_agent_experiment(self, target: TargetState) -> None:
        started = self.clock()
        try:
            proposal = self.agent.propose(self.journal.briefing.context(
                target, self.state.next_experiment, self.journal.results))
        except AgentStop:
            raise
        except Exception as exc:  # an agent bug must not end the night
            proposal = Proposal(source="", description="agent error",
                                error=f"{type(exc).__name__}: {exc}")
        notice = getattr(self.agent, "take_notice", None)  # e.g. the hybrid's handover
        if callable(notice) and isinstance(text := notice(), str) and text:
            self.dashboard.message(f"{target.tag}: {text}")
        if proposal is None:
            target.agent_exhausted = True
            why = getattr(self.agent, "last_message", "") or "nothing left worth trying"
            self.dashboard.message(f"{target.tag}: the agent reports its search exhausted ({why})")
            self.journal.save()
            return
        if proposal.error:
            self.journal.record_agent_failure(target, proposal_fields(proposal, self.agent.name),
                                              proposal.error, self.clock() - started)
            return
        self._experiment(target, proposal, baseline=False, spent_before=self.clock() - started)

    def _experiment(self, target: TargetState, proposal: Proposal, *, baseline: bool,
                    spent_before: float = 0.0, agent_name: str | None = None) -> None:
        """One journaled experiment; the agent then learns its verdict."""
        fields = proposal_fields(proposal, agent_name or (
            "starter" if baseline else self.agent.name))
        flight = self.journal.start(target, proposal, fields, baseline=baseline,
                                    spent_before=spent_before)
        result = self.journal.last_result
        if result is None:
            return
        try:
            self.agent.observe(proposal, result, flight.verdict == "keep")
        except Exception as exc:  # learning is best-effort; the night goes on
            self.dashboard.message(f"agent.observe failed: {type(exc).__name__}: {exc}")


def _packaged_starter(kernel_type: str) -> str:
    from autokernel.kernels import starter_path

    return starter_path(kernel_type).read_text(encoding="utf-8")


def _packaged_cuda_starter(kernel_type: str) -> str | None:
    from autokernel.kernels import starter_path

    try:
        return starter_path(kernel_type, backend="cuda").read_text(encoding="utf-8")
    except NotImplementedError:  # the type has no CUDA starter (yet)
        return None

