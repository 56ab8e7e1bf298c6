"""The head's loop when experiments are judged by several workers: `ParallelRunner`.

The head is the workspace's one writer. Its loop, as `ParallelRunner.run` tells it:

    take the run lock, catch Ctrl-C, repair whatever a crash left (as the one-GPU loop does),
    start the workers (`local.LocalPool` or `ray_backend.RayPool`; GPUs of different models
    are refused)
    until a stop rule, the time budget or the user ends it:
        give every free worker work, first a lost worker's job, then:
            an open target with nothing in flight (targets in order of share), its baseline
            first; else the next target not started, while targets are fewer than workers;
            else another candidate of an open target whose agent can propose ahead
        wait for a verdict, and record it: the journal writes the row, commits a keep,
        resets a non-keep, as in the one-GPU loop (`autokernel.loop.journal`)
        a target a move-on rule ends takes no new work; once its last verdict is in, it is
        finished and committed; revisit rounds follow while time is left

Experiment numbers are given when a verdict is recorded, so results.tsv stays 0..N-1 in order
whatever order the workers finish in, and a job lost with the head leaves no gap.

Keep decisions compare only timings of one GPU: each job carries the target's best kernel,
which the worker times in the same rounds as the candidate (`worker.JudgeWorker`). A verdict
reached against a best that a sibling candidate has since replaced is not recorded as a keep: the
candidate is judged again against the new best.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, replace
from typing import Any, Protocol

from autokernel.agents.base import AgentStop, Proposal
from autokernel.harness.result import BenchResult, Status
from autokernel.loop import repair as crash_repair
from autokernel.loop.config import CPU_LOOP_NOTE, LoopConfig
from autokernel.loop.context import Briefing
from autokernel.loop.dashboard import Dashboard, PlainDashboard
from autokernel.loop.journal import Journal
from autokernel.loop.rows import proposal_fields, tunables_of
from autokernel.loop.schedule import (
    begin_visit, move_on_record, pending_targets, position_of, queue_revisits,
)
from autokernel.loop.signals import StopSignals
from autokernel.loop.state import InFlight, RunState, TargetState
from autokernel.loop.workspace import RunLock, Workspace
from autokernel.orchestrate import Decision, should_move_on
from autokernel.parallel.agents import TargetAgents
from autokernel.parallel.board import BOARD_FILE, Board
from autokernel.parallel.clock import ParallelAccounts
from autokernel.parallel.slots import one_model
from autokernel.parallel.worker import JudgeJob, JudgeOutcome, WorkerIdentity, describe_worker
from autokernel.profiling.plan import Plan
from autokernel.text import count_of

WAIT_S = 1.0  # how often the loop looks at Ctrl-C and the clock while verdicts are pending
LOST_TWICE = 2  # a job whose worker was lost this many times is recorded as a crash


class ParallelError(RuntimeError):
    """The workers cannot judge this run together (GPUs of different models)."""


class WorkerPool(Protocol):
    kind: str

    def start(self) -> list[WorkerIdentity]: ...

    def submit(self, index: int, job: JudgeJob) -> Future[JudgeOutcome]: ...

    def is_lost(self, error: BaseException) -> bool: ...

    def restart(self, index: int) -> Future[WorkerIdentity]: ...

    def close(self, *, abandon: bool = False) -> None: ...


@dataclass
class Dispatch:
    """A job handed to a worker, with what recording its verdict needs."""

    job: JudgeJob
    target: TargetState
    proposal: Proposal
    fields: dict[str, Any]
    slot: int
    spent_before: float  # the proposal's seconds
    attempts: int = 1  # times judging it started (a lost worker's job starts again)


class ParallelRunner:
    """Drives one workspace with a pool of workers until every target is done, time is up,
    or the user stops it. `agents` gives each target its agent."""

    def __init__(self, workspace: Workspace, plan: Plan, state: RunState, config: LoopConfig,
                 agents: TargetAgents, pool: WorkerPool, *, dashboard: Dashboard | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 starter_source: Callable[[str], str] | None = None,
                 cuda_starter_source: Callable[[str], str | None] | None = None) -> None:
        self.ws = workspace
        self.plan = plan
        self.state = state
        self.config = config
        self.agents = agents
        self.pool = pool
        self.clock = clock
        self.starter_source = starter_source or packaged_starter
        self.cuda_starter_source = cuda_starter_source or packaged_cuda_starter
        self.accounts = ParallelAccounts(state, clock)
        briefing = Briefing(workspace, plan, config, best_source=self._best_source)
        self.journal = Journal(workspace, plan, state, config, accounts=self.accounts,
                               dashboard=dashboard or PlainDashboard(), briefing=briefing,
                               bench=None, clock=clock)
        self.board = Board(workspace.cache_dir / BOARD_FILE, clock)
        self.signals = StopSignals(on_first=lambda: self.dashboard.message(
            "stopping after the experiments in flight (Ctrl-C again to abort them now)"))
        self.labels: list[str] = []
        self.running: dict[Future[JudgeOutcome], Dispatch] = {}
        self.requeued: list[Dispatch] = []
        self.restarting: dict[int, Future[WorkerIdentity]] = {}
        self.stop_message = ""
        self._jobs = 0
        self._agent_stop = ""
        self._sources: dict[str, str] = {}  # commit -> kernel.py, read once

    @property
    def dashboard(self) -> Dashboard:
        return self.journal.dashboard

    def extend_hours(self, hours: float) -> None:
        self.config.hours = hours
        self.accounts.extend_hours(hours)

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> str:
        """Run until done; return the reason the loop stopped (also kept in state.json)."""
        lock = RunLock(self.ws)
        lock.acquire()
        self.signals.install()
        self.dashboard.start(self.state)
        abandon = False
        try:
            if self.config.device == "cpu":
                self.dashboard.message(CPU_LOOP_NOTE)
            crash_repair.repair(self.journal)
            self._start_workers()
            return self._loop()
        except KeyboardInterrupt:
            abandon = True
            self.journal.abort_in_flight()
            return self._stop("aborted by a second Ctrl-C; the experiments in flight were "
                              "discarded and the tree reset to the last kept commit")
        finally:
            self.pool.close(abandon=abandon)
            self.journal.save()
            self.dashboard.stop()
            self.signals.restore()
            lock.release()

    def _start_workers(self) -> None:
        identities = self.pool.start()
        refusal = one_model({i.label: i.device_name for i in identities})
        if refusal:
            raise ParallelError(refusal)
        self.labels = [identity.label for identity in identities]
        for identity in identities:
            self.board.join(identity.label, device_name=identity.device_name, pid=identity.pid,
                            host=identity.host)
        self.dashboard.message(f"{count_of(len(identities), 'worker')} ({self.pool.kind}): "
                               + ", ".join(describe_worker(i.label) for i in identities))
        self._say_board(always=True)

    def _loop(self) -> str:
        stopping = ""
        while True:
            self.accounts.tick()
            if not stopping:
                stopping = self._stop_requested()
            if not stopping:
                self._give_out_work()
                stopping = self._agent_stop and f"the agent stopped: {self._agent_stop}"
            if not self.running and not self.requeued:
                if stopping:
                    return self._end(stopping)
                if not self._open_targets():
                    if not pending_targets(self.state) and not self._queue_revisits():
                        return self._finish_run("every target is done")
                    continue
            self._wait()

    def _stop_requested(self) -> str:
        if self.signals.requested:
            return "interrupted"
        if self.accounts.out_of_time():
            return f"the run's time budget ({self.state.hours:g} h) is spent"
        return ""

    def _end(self, reason: str) -> str:
        if reason == "interrupted":
            return self._stop(reason)  # open targets go on at `resume`
        rule = "hours" if reason.startswith("the run's time budget") else "stopped"
        why = (f"hours: the run's {self.state.hours:g} h are spent" if rule == "hours"
               else f"stopped: {self._agent_stop}")
        for target in self._open_targets():
            self.journal.finish_target(target, Decision(True, rule, why))
        return self._finish_run(reason)

    def _stop(self, reason: str) -> str:
        for agent in self.agents.all():
            handover = getattr(agent, "handover_note", "")
            if isinstance(handover, str) and handover:
                reason = f"{reason}; {handover}"
                break
        self.state.stop_reason = reason
        self.stop_message = reason
        self._say_board(always=True)
        return reason

    def _finish_run(self, reason: str) -> str:
        self.state.finished = True
        self.state.current = None
        return self._stop(reason)

    # -- handing out work -----------------------------------------------------------------------
    def _free_slots(self) -> list[int]:
        busy = {d.slot for d in self.running.values()} | set(self.restarting)
        return [i for i in range(len(self.labels)) if i not in busy]

    def _give_out_work(self) -> None:
        for slot in self._free_slots():
            if self.requeued:
                self._submit(self.requeued.pop(0), slot)
                continue
            outcome = "progress"
            while outcome == "progress" and not self._stop_requested():
                outcome = self._next_work(slot)
            if outcome != "dispatched" or self._agent_stop:
                return

    def _open_targets(self) -> list[TargetState]:
        return [t for t in self.state.targets if t.status == "active"]

    def _in_flight(self, target: TargetState) -> list[Dispatch]:
        return [d for d in [*self.running.values(), *self.requeued] if d.target is target]

    def _next_work(self, slot: int) -> str:
        """Give slot `slot` one job: "dispatched"; "progress" when a target was finished or
        opened, or an experiment recorded, instead (ask again); "idle" when there is nothing."""
        open_targets = self._open_targets()
        for target in open_targets:
            if not self._in_flight(target):
                return self._work_for(target, slot)
        if pending_targets(self.state) and len(open_targets) < len(self.labels):
            self._open_next_target()
            return "progress"
        for target in sorted(open_targets, key=lambda t: len(self._in_flight(t))):
            if self.agents.can_propose_ahead(target.tag):
                outcome = self._work_for(target, slot)
                if outcome != "idle":
                    return outcome
        return "idle"

    def _work_for(self, target: TargetState, slot: int) -> str:
        in_flight = len(self._in_flight(target))
        if target.baseline is None:
            return "idle" if in_flight else self._baseline(target, slot)
        if self._cuda_trial_due(target):
            return "idle" if in_flight else self._cuda_trial(target, slot)
        record = move_on_record(target)
        decision = should_move_on(replace(record, experiments=record.experiments + in_flight),
                                  self.config.move_on)
        if decision.move_on:
            if in_flight:
                return "idle"  # its verdicts in flight come first
            self.journal.finish_target(target, decision)
            return "progress"
        return self._propose(target, slot, in_flight)

    def _open_next_target(self) -> TargetState:
        pending = pending_targets(self.state)
        target = pending[0]
        begin_visit(self.state, target, self.accounts.visit_budget(
            len(pending) + len(self._open_targets()), len(self.labels)))
        if target.visits == 1:
            target.status = "active"
            self.journal.save()
        else:
            self.journal.reopen(target)
        self.dashboard.target_started(self.state, target)
        return target

    def _queue_revisits(self) -> bool:
        revisits = queue_revisits(self.state, self.config)
        if revisits:
            self.dashboard.message(f"revisit round {self.state.visit_round}: "
                                   f"{', '.join(t.tag for t in revisits)}")
        return bool(revisits)

    def _baseline(self, target: TargetState, slot: int) -> str:
        kernel_type = target.kernel_type
        try:
            source, description = self.starter_source(kernel_type), \
                f"baseline: the {kernel_type} starter"
            if self.config.backend == "cuda":
                cuda = self.cuda_starter_source(kernel_type)
                if cuda is not None:
                    source, description = cuda, f"baseline: the {kernel_type} CUDA starter"
                else:
                    self.dashboard.message(f"{target.tag}: no CUDA starter for {kernel_type}; "
                                           "it starts from its Triton starter")
        except (FileNotFoundError, KeyError, NotImplementedError) as exc:
            target.status = "done"
            target.stop_rule, target.stop_reason = "no-starter", f"no starter kernel: {exc}"
            self.journal.save()
            self.dashboard.message(f"skipping {target.tag}: {target.stop_reason}")
            return "progress"
        proposal = Proposal(source=source, description=description, agent="starter")
        self._dispatch(target, slot, proposal, proposal_fields(proposal, "starter"),
                       baseline=True)
        return "dispatched"

    def _cuda_trial_due(self, target: TargetState) -> bool:
        return (self.config.backend == "auto" and self.config.device == "cuda"
                and not target.cuda_starter_tried and target.best is not None)

    def _cuda_trial(self, target: TargetState, slot: int) -> str:
        target.cuda_starter_tried = True  # once, even if the trial is interrupted
        self.journal.save()
        source = self.cuda_starter_source(target.kernel_type)
        if source is None:
            return "progress"
        proposal = Proposal(source=source, agent="starter", description=(
            f"the {target.kernel_type} CUDA starter (--backend auto: kept only where it beats "
            "the Triton kernel)"))
        self._dispatch(target, slot, proposal, proposal_fields(proposal, "starter"))
        return "dispatched"

    def _propose(self, target: TargetState, slot: int, in_flight: int) -> str:
        agent = self.agents.of(target.tag)
        started = self.clock()
        context = self.journal.briefing.context(target, self._provisional_number(),
                                                self.journal.results)
        context.sibling_drafts = [d.job.source for d in self._in_flight(target)]
        try:
            proposal = agent.propose(context)
        except AgentStop as exc:
            self._agent_stop = str(exc)
            return "idle"
        except Exception as exc:  # an agent bug must not end the night
            proposal = Proposal(source="", description="agent error",
                                error=f"{type(exc).__name__}: {exc}")
        notice = getattr(agent, "take_notice", None)
        if callable(notice) and isinstance(text := notice(), str) and text:
            self.dashboard.message(f"{target.tag}: {text}")
        if proposal is None:
            if in_flight:
                return "idle"  # nothing more until its candidates in flight are measured
            target.agent_exhausted = True
            why = getattr(agent, "last_message", "") or "nothing left worth trying"
            self.dashboard.message(f"{target.tag}: the agent reports its search exhausted ({why})")
            self.journal.save()
            return "progress"
        fields = proposal_fields(proposal, agent.name)
        if proposal.error:
            self.journal.record_agent_failure(target, fields, proposal.error,
                                              self.clock() - started)
            return "progress"
        self._dispatch(target, slot, proposal, fields, spent_before=self.clock() - started)
        return "dispatched"

    def _provisional_number(self) -> int:
        """The experiment number a proposal made now will probably get (exact whenever nothing
        else is in flight): verdicts are numbered as they are recorded."""
        return self.state.next_experiment + len(self.running) + len(self.requeued)

    def _best_source(self, target: TargetState) -> str:
        commit = target.best_commit or (target.best.commit if target.best else None)
        if commit is None:
            return self.journal.best_source(target)  # raises RunInconsistent, with the reason
        if commit not in self._sources:
            self._sources[commit] = self.ws.file_at(commit, "kernel.py")
        return self._sources[commit]

    def _dispatch(self, target: TargetState, slot: int, proposal: Proposal,
                  fields: dict[str, Any], *, baseline: bool = False,
                  spent_before: float = 0.0) -> None:
        self._jobs += 1
        incumbent = None if baseline or target.best is None or not target.best.passed \
            else self._best_source(target)
        job = JudgeJob(number=self._jobs, plan=self.plan, target=copy.deepcopy(target),
                       config=self.config, source=proposal.source, incumbent=incumbent,
                       best_commit=None if baseline else target.best_commit, baseline=baseline,
                       experiment=self._provisional_number())
        self._submit(Dispatch(job, target, proposal, fields, slot, spent_before), slot)

    def _submit(self, dispatch: Dispatch, slot: int) -> None:
        dispatch.slot = slot
        try:
            future = self.pool.submit(slot, dispatch.job)
        except Exception as exc:
            if not self.pool.is_lost(exc):
                raise
            # The worker died while idle, between its last verdict and this job (a full CPU
            # suite saw it): nothing of the job ran, so it waits for a worker again, its
            # attempts unchanged, and this one starts afresh.
            label = self.labels[slot]
            self.board.lost(label)
            self.dashboard.message(f"{describe_worker(label)} was lost while idle "
                                   f"({type(exc).__name__}); it starts again")
            self._restart(slot)
            self.requeued.append(dispatch)
            return
        self.running[future] = dispatch
        self.board.busy(self.labels[slot], dispatch.target.tag)

    # -- verdicts -------------------------------------------------------------------------------
    def _wait(self) -> None:
        waiting = [*self.running, *self.restarting.values()]
        if not waiting:
            time.sleep(0.05)  # a lost job waits for a worker to come back
            return
        done, _ = wait(waiting, timeout=WAIT_S, return_when=FIRST_COMPLETED)
        for slot, future in list(self.restarting.items()):
            if future in done:
                del self.restarting[slot]
                self._worker_back(slot, future)
        for future in [f for f in self.running if f in done]:
            self._collect(future)
        self._say_board()

    def _worker_back(self, slot: int, future: Future[WorkerIdentity]) -> None:
        try:
            identity = future.result()
        except Exception as exc:  # could not start again: try once more
            self.dashboard.message(f"{describe_worker(self.labels[slot])} did not restart "
                                   f"({type(exc).__name__}: {exc}); trying again")
            self._restart(slot)
            return
        self.labels[slot] = identity.label
        self.board.join(identity.label, device_name=identity.device_name, pid=identity.pid,
                        host=identity.host)

    def _restart(self, slot: int) -> None:
        # Not waited for here: a Ray actor may wait minutes for a node; the others go on.
        self.restarting[slot] = self.pool.restart(slot)

    def _collect(self, future: Future[JudgeOutcome]) -> None:
        dispatch = self.running.pop(future)
        label = self.labels[dispatch.slot]
        try:
            outcome = future.result()
        except Exception as exc:
            if self.pool.is_lost(exc):
                self._lost(dispatch, label, exc)
                return
            outcome = self._crashed(dispatch, label, f"the worker failed: "
                                    f"{type(exc).__name__}: {exc}")
        target = dispatch.target
        if (outcome.verdict == "keep" and not dispatch.job.baseline
                and dispatch.job.best_commit != target.best_commit):
            # Judged against a best that a sibling has since replaced: judge it again.
            self.board.done(label, recorded=False)
            self.dashboard.message(f"{target.tag}: a candidate kept against an earlier best is "
                                   "judged again against the new one "
                                   f"({dispatch.proposal.description})")
            dispatch.job = replace(dispatch.job, target=copy.deepcopy(target),
                                   incumbent=self._best_source(target),
                                   best_commit=target.best_commit)
            self.requeued.append(dispatch)
            return
        self.board.done(label, recorded=True)
        self._record(dispatch, outcome)

    def _lost(self, dispatch: Dispatch, label: str, error: BaseException) -> None:
        self.board.lost(label)
        self._restart(dispatch.slot)
        if dispatch.attempts >= LOST_TWICE:
            self.dashboard.message(f"{describe_worker(label)} was lost again judging "
                                   f"{dispatch.target.tag}'s candidate: recorded as a crash")
            self._record(dispatch, self._crashed(
                dispatch, label, f"its worker was lost {LOST_TWICE} times while judging it"))
            return
        self.dashboard.message(f"{describe_worker(label)} was lost ({type(error).__name__}); "
                               f"its {dispatch.target.tag} experiment is judged again")
        dispatch.attempts += 1
        self.requeued.append(dispatch)

    def _crashed(self, dispatch: Dispatch, label: str, reason: str) -> JudgeOutcome:
        result = BenchResult(status=Status.CRASH, stage="harness", reason=reason,
                             kernel_type=dispatch.target.kernel_type, device=self.config.device)
        return JudgeOutcome(result=result.to_dict(),
                            verdict="baseline" if dispatch.job.baseline else "crash",
                            reason=reason, vs_best=None, seconds=0.0, worker=label, pid=0)

    def _record(self, dispatch: Dispatch, outcome: JudgeOutcome) -> None:
        """One verdict into the workspace, through the journal: row, commit or reset, state."""
        target, source = dispatch.target, dispatch.job.source
        self.state.in_flight = InFlight(
            experiment=self.state.next_experiment, target=position_of(self.state, target),
            phase="benchmarked", source=source, baseline=dispatch.job.baseline,
            tunables=tunables_of(source), bench_attempts=dispatch.attempts,
            seconds_before=dispatch.spent_before + outcome.seconds, result=outcome.result,
            verdict=outcome.verdict, verdict_reason=outcome.reason, vs_best=outcome.vs_best,
            gpu=outcome.worker, **dispatch.fields)
        self.journal.save()
        self.journal.continue_in_flight()
        result = self.journal.last_result
        if result is None:
            return
        agent = self.agents.of(target.tag)
        try:
            agent.observe(dispatch.proposal, result, outcome.verdict == "keep")
        except Exception as exc:  # learning is best-effort; the night goes on
            self.dashboard.message(f"agent.observe failed: {type(exc).__name__}: {exc}")
        if dispatch.job.baseline and target.baseline is not None and not result.passed \
                and result.stage == "harness":
            # The harness cannot judge this target: every experiment would fail the same way.
            self.journal.finish_target(target, Decision(True, "harness-error",
                                                        f"harness-error: {result.reason}"))

    def _say_board(self, always: bool = False) -> None:
        """The per-GPU lines to the dashboard (a log shows them every few minutes)."""
        show = getattr(self.dashboard, "workers", None)
        if callable(show) and self.board.workers:
            show(self.board.lines(), always=always)


def packaged_starter(kernel_type: str) -> str:
    from autokernel.kernels import starter_path

    return starter_path(kernel_type).read_text(encoding="utf-8")


def packaged_cuda_starter(kernel_type: str) -> str | None:
    from autokernel.kernels import starter_path

    try:
        return starter_path(kernel_type, backend="cuda").read_text(encoding="utf-8")
    except NotImplementedError:  # the type has no CUDA starter (yet)
        return None
