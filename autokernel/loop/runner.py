"""The experiment loop: targets in Amdahl order, one agent edit of kernel.py per experiment.

One experiment:

    agent.propose(context) -> Proposal (the whole new kernel.py)
    journal "written", write kernel.py
    harness at the target's profiled shapes and dtype -> BenchResult
    verdict: KEEP if it passes and, timed in the same rounds as the best, is faster beyond
             doubt (`autokernel.loop.keep`), else REVERT (or fail / crash / timeout / rejected)
    journal "benchmarked"; a keep is committed (journal "committed")
    append the row to results.tsv; a non-keep resets the tree to the last kept commit
    one atomic state write: counters, best, experiment number, journal cleared

Experiment 0 of a target is its starter, committed as the target's baseline. Before each
experiment `autokernel.orchestrate.should_move_on` decides whether the target is done; a finished
target's best kernel.py is saved under kernels/ and committed. When every target is done and the
run still has time (`--hours`), targets that stopped on a plateau or on their time share are
revisited, continuing their search from their best kernel.

`repair` brings an interrupted workspace back to a consistent state before anything else runs,
using the journal in state.json, results.tsv and the branch (see autokernel.loop.state).
"""

from __future__ import annotations

import inspect
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autokernel.agents.base import Agent, AgentContext, AgentStop, Attempt, Proposal
from autokernel.harness.result import BenchResult, Status
from autokernel.kernelfile import KernelFileError, parse_kernel_source
from autokernel.loop.dashboard import Dashboard, PlainDashboard, row_summary, times
from autokernel.loop.keep import KeepVerdict, verdict_for
from autokernel.loop.results import COMMITTED_STATUSES, ResultRow, ResultsLog, sanitize
from autokernel.loop.state import InFlight, Measurement, RunState, TargetState
from autokernel.loop.workspace import KERNEL_FILE, KERNELS_DIR, RunLock, Workspace, WorkspaceError
from autokernel.orchestrate import Decision, MoveOnConfig, TargetRecord, should_move_on
from autokernel.profiling.plan import Plan, Target

BenchFn = Callable[..., BenchResult]

# Stop rules after which a target is worth another visit when the run has time left.
REVISIT_RULES = frozenset({"plateau", "time", "hours", "stopped"})
CPU_TIMING_NOTE = (
    "device cpu: kernels run in the Triton interpreter; timings are host-clock figures that say "
    "nothing about a GPU (the keep rule still compares them; the %-of-peak rule is off)"
)


@dataclass
class LoopConfig:
    """Everything that decides how the loop behaves; saved in run.json so resume reuses it."""

    device: str
    dtype: str
    agent: str  # the resolved agent name
    hours: float | None = 8.0
    move_on: MoveOnConfig = field(default_factory=MoveOnConfig)
    min_keep_margin: float = 0.01  # keep when the paired speedup's 95% lower bound > 1 + this
    bench_timeout_s: float = 120.0
    max_shapes: int = 2  # profiled shapes timed per experiment (most time first); every profiled
    # shape is checked for correctness
    harness_quick: bool = False  # the harness's smaller shape sweep (the cpu default: CI time)
    screen: bool = True  # quick sweep first; the full sweep only for a candidate about to be kept
    timing_budget_s: float = 1.0  # the harness's timing budget per shape
    check_all_dtypes: bool = False  # correctness in every dtype of the op, not only the model's
    revisit: bool = True
    max_rounds_without_keep: int = 2  # stop revisiting after this many rounds with no keep
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopConfig:
        data = dict(data)
        data["move_on"] = MoveOnConfig(**data.get("move_on", {}))
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


class RunInconsistent(RuntimeError):
    """The workspace cannot be brought back to a state consistent with results.tsv."""


def default_bench() -> BenchFn:
    from autokernel.harness.runner import run_bench

    return run_bench


def _call_bench(bench: BenchFn, kernel_path: Path, **options: Any) -> BenchResult:
    """Call the harness with the options it accepts (they differ between harness versions)."""
    try:
        parameters = inspect.signature(bench).parameters
    except (TypeError, ValueError):
        return bench(kernel_path, **options)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        options = {k: v for k, v in options.items() if k in parameters}
    return bench(kernel_path, **options)


# ---------------------------------------------------------------------------------------------
# Figures of one harness verdict


def shape_weights(target: Target, shapes: list[list[int]]) -> dict[tuple[int, ...], float]:
    """Each timed shape's share of the target's profiled time (equal shares if unknown)."""
    time_at: dict[tuple[int, ...], float] = {}
    for site in target.call_sites:
        key = tuple(site.shape)
        time_at[key] = time_at.get(key, 0.0) + max(site.time_ms, 0.0)
    wanted = [tuple(s) for s in shapes]
    total = sum(time_at.get(s, 0.0) for s in wanted)
    if total <= 0:
        return {s: 1.0 / len(wanted) for s in wanted} if wanted else {}
    return {s: time_at.get(s, 0.0) / total for s in wanted}


def measure(result: BenchResult, experiment: int, commit: str,
            weights: dict[tuple[int, ...], float]) -> Measurement:
    """The figures the keep rule compares: call-weighted over the timed shapes when the harness
    timed several, else the primary shape's."""
    timings = [t for t in result.timings if tuple(t.shape) in weights]
    covered = {tuple(t.shape) for t in timings}
    latency, iqr = result.latency_us, result.iqr_us
    eager, compiled = result.eager_latency_us, result.compile_latency_us
    weighted_shapes = 1
    if len(covered) > 1 and covered == set(weights):
        weighted_shapes = len(covered)
        per_shape = {tuple(t.shape): t for t in timings}

        def weighted(attr: str) -> float | None:
            values = [getattr(per_shape[s], attr) for s in weights]
            if any(v is None for v in values):
                return None
            return sum(w * v for w, v in zip(weights.values(), values))

        latency, iqr = weighted("latency_us"), weighted("iqr_us")
        eager, compiled = weighted("eager_us"), weighted("compile_us")
    return Measurement(
        experiment=experiment,
        commit=commit,
        latency_us=latency,
        iqr_us=iqr,
        primary_latency_us=result.latency_us,
        eager_us=eager,
        compile_us=compiled,
        speedup_vs_eager=eager / latency if eager and latency else None,
        speedup_vs_compile=compiled / latency if compiled and latency else None,
        pct_peak=result.pct_peak_datasheet,
        pct_peak_measured=result.pct_peak_measured,
        passed=result.passed,
        shapes=weighted_shapes,
    )


def _speedups_text(m: Measurement | None, best: Measurement | None = None) -> str:
    """"41.2 µs (1.18× best, 2.9× eager, 1.1× compile)"; with several timed shapes the figures
    are call-weighted over them, and say so."""
    if m is None or m.latency_us is None:
        return ""
    parts = [f"{m.latency_us:.1f} µs" + (f" weighted over {m.shapes} shapes" if m.shapes > 1
                                         else "")]
    inner = []
    if best is not None and best.latency_us:
        inner.append(f"{times(best.latency_us / m.latency_us)} best")
    if m.speedup_vs_eager is not None:
        inner.append(f"{times(m.speedup_vs_eager)} eager")
    if m.speedup_vs_compile is not None:
        inner.append(f"{times(m.speedup_vs_compile)} compile")
    if inner:
        parts.append(f"({', '.join(inner)})")
    return " ".join(parts)


def _attempt_from_row(row: dict[str, str]) -> Attempt:
    import json

    def number(key: str) -> float | None:
        text = row.get(key) or ""
        return float(text) if text else None

    objective = number("objective_us")
    return Attempt(
        experiment=int(row["experiment"]),
        description=row.get("description", ""),
        status=row.get("status", ""),
        latency_us=objective if objective is not None else number("latency_us"),
        speedup_vs_eager=number("speedup_vs_pytorch"),
        speedup_vs_compile=number("speedup_vs_compile"),
        stage=row.get("stage") or None,
        reason=row.get("reason", ""),
        tunables=json.loads(row["tunables"]) if row.get("tunables") else {},
        launch_digest=row.get("launch_digest") or "",
    )


def _tunables_of(source: str) -> dict[str, Any]:
    try:
        return dict(parse_kernel_source(source).tunables)
    except KernelFileError:
        return {}


# ---------------------------------------------------------------------------------------------
# The loop


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
        bench: BenchFn | None = None,
        dashboard: Dashboard | None = None,
        clock: Callable[[], float] = time.monotonic,
        starter_source: Callable[[str], str] | None = None,
    ) -> None:
        self.ws = workspace
        self.plan = plan
        self.state = state
        self.config = config
        self.agent = agent
        self.bench = bench
        self.dashboard: Dashboard = dashboard or PlainDashboard()
        self.clock = clock
        self.starter_source = starter_source or _packaged_starter
        self.results = ResultsLog(workspace.results_path)
        self.stop_requested = False
        self.stop_message = ""
        self._interrupts = 0
        self._last_tick = clock()
        self._history: dict[int, list[Attempt]] = {}
        self._reference_sources: dict[str, str] = {}
        self._last_result: BenchResult | None = None

    # -- the time accounts ---------------------------------------------------------------------
    def _tick(self) -> None:
        """Add the time since the last tick to the run's and the current target's clocks."""
        now = self.clock()
        delta = max(0.0, now - self._last_tick)
        self._last_tick = now
        self.state.run_seconds += delta
        if self.state.current is not None:
            target = self.state.targets[self.state.current]
            target.seconds += delta
            target.visit_seconds += delta

    def _save(self) -> None:
        self._tick()
        self.state.save(self.ws.state_path)

    def _out_of_time(self) -> bool:
        left = self.state.remaining_seconds
        return left is not None and left <= 0

    # -- public entry ---------------------------------------------------------------------------
    def run(self) -> str:
        """Run until done; return the reason the loop stopped (also kept in state.json)."""
        lock = RunLock(self.ws)
        lock.acquire()
        handlers = self._install_signal_handlers()
        self.dashboard.start(self.state)
        try:
            if self.config.device == "cpu":
                self.dashboard.message(CPU_TIMING_NOTE)
            self.repair()
            return self._loop()
        except KeyboardInterrupt:
            self._abort_in_flight()
            return self._stop("aborted by a second Ctrl-C; the experiment in progress was "
                              "discarded and the tree reset to the last kept commit")
        finally:
            self._save()
            self.dashboard.stop()
            self._restore_signal_handlers(handlers)
            lock.release()

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: Any) -> None:
            self._interrupts += 1
            if self._interrupts >= 2 and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self.stop_requested = True
            self.dashboard.message(
                "stopping after the current experiment (Ctrl-C again to abort it now)"
            )

        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def _stop(self, reason: str) -> str:
        self.state.stop_reason = reason
        self.stop_message = reason
        self.dashboard.message(f"stopped: {reason}")
        return reason

    def _loop(self) -> str:
        while True:
            if self.stop_requested:
                return self._stop("interrupted; continue with `autokernel resume "
                                  f"{self.ws.root}`")
            target = self._current_target()
            if self._out_of_time():
                if target is not None:
                    self._finish_target(target, Decision(
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
            decision = should_move_on(self._record(target), self.config.move_on)
            if decision.move_on:
                self._finish_target(target, decision)
                continue
            try:
                self._run_agent_experiment(target)
            except AgentStop as exc:
                self._finish_target(target, Decision(True, "stopped", f"stopped: {exc}"))
                return self._finish_run(f"the agent stopped: {exc}")

    def extend_hours(self, hours: float) -> None:
        """A new time budget for the whole run (resume --hours): the target in progress gets its
        share of the new remaining time."""
        self.state.hours = hours
        self.config.hours = hours
        if self.state.current is not None:
            target = self.state.targets[self.state.current]
            pending = sum(t.status == "pending" for t in self.state.targets)
            left = self.state.remaining_seconds or 0.0
            target.visit_budget_seconds = target.visit_seconds + max(0.0, left) / (pending + 1)

    def _finish_run(self, reason: str) -> str:
        self.state.finished = True
        self.state.current = None
        return self._stop(reason)

    # -- targets --------------------------------------------------------------------------------
    def _current_target(self) -> TargetState | None:
        if self.state.current is None:
            return None
        target = self.state.targets[self.state.current]
        return target if target.status == "active" else None

    def _open_next_target(self) -> TargetState | None:
        self._tick()
        pending = [t for t in self.state.targets if t.status == "pending"]
        if not pending and not self._start_revisit_round():
            return None
        pending = [t for t in self.state.targets if t.status == "pending"]
        target = pending[0]
        left = self.state.remaining_seconds
        target.visit_budget_seconds = left / len(pending) if left is not None else None
        target.visits += 1
        target.visit_seconds = 0.0
        target.visit_keeps = 0
        target.consecutive_reverts = 0
        target.agent_exhausted = False
        target.stop_rule, target.stop_reason = None, ""
        self.state.current = self._position(target)
        if target.visits == 1:
            target.status = "active"
            self._save()
        else:
            self._reopen(target)
        self.dashboard.target_started(self.state, target)
        return target

    def _start_revisit_round(self) -> bool:
        """Queue the targets worth another visit; False when there are none."""
        if not self.config.revisit or self.state.hours is None:
            return False
        this_round = [t for t in self.state.targets if t.stops
                      and t.stops[-1].get("round") == self.state.visit_round]
        if this_round and not any(t.stops[-1].get("keeps", 0) for t in this_round):
            self.state.rounds_without_keep += 1
        else:
            self.state.rounds_without_keep = 0
        if self.state.rounds_without_keep >= self.config.max_rounds_without_keep:
            return False
        limit = self.config.move_on.target_seconds
        eligible = [
            t for t in self.state.targets
            if t.status == "done" and t.stop_rule in REVISIT_RULES and t.baseline is not None
            and (limit is None or t.seconds < limit)
        ]
        if not eligible:
            return False
        self.state.visit_round += 1
        for t in eligible:
            t.status = "pending"
        self.dashboard.message(
            f"revisit round {self.state.visit_round}: {', '.join(t.tag for t in eligible)}"
        )
        return True

    def _reopen(self, target: TargetState) -> None:
        """Put a revisited target's best kernel back into kernel.py, as a commit."""
        target.status = "reopening"
        self._save()
        source = self._best_source_of(target)
        self.ws.write_kernel(source)
        commit = self.ws.commit_paths(
            f"revisit {target.tag}: continue from its best, exp "
            f"{target.best.experiment if target.best else target.baseline.experiment}",
            [KERNEL_FILE],
        )
        self._complete_reopen(target, commit)

    def _complete_reopen(self, target: TargetState, commit: str) -> None:
        target.status = "active"
        target.best_commit = commit
        self.state.head = commit
        self._save()

    def _best_source_of(self, target: TargetState) -> str:
        commit = target.best_commit or (target.best.commit if target.best else None)
        if commit is None:
            raise RunInconsistent(f"target {target.tag} has no committed kernel to continue from")
        return self.ws.file_at(commit, KERNEL_FILE)

    def _finish_target(self, target: TargetState, decision: Decision) -> None:
        target.status = "finishing"
        target.stop_rule, target.stop_reason = decision.rule, decision.reason
        target.stops.append({
            "round": self.state.visit_round, "visit": target.visits, "rule": decision.rule,
            "reason": decision.reason, "experiments": target.experiments,
            "keeps": target.visit_keeps, "seconds": round(target.visit_seconds, 1),
        })
        self._save()
        self._complete_finish(target)

    def _complete_finish(self, target: TargetState) -> None:
        best = target.best
        paths: list[str] = []
        if best is not None and best.passed:
            relative = f"{KERNELS_DIR}/{target.tag}.py"
            (self.ws.root / relative).parent.mkdir(exist_ok=True)
            (self.ws.root / relative).write_text(self.ws.read_kernel(), encoding="utf-8")
            target.kernel_file = relative
            paths.append(relative)
        summary = _speedups_text(best) if best is not None and best.passed else "no passing kernel"
        exp = f"best exp {best.experiment}, " if best is not None and best.passed else ""
        commit = self.ws.commit_paths(
            sanitize(f"finish {target.tag}: {exp}{summary} — {target.stop_reason}", 300),
            paths or [KERNEL_FILE],
        )
        self.state.head = commit
        target.status = "done"
        self.state.current = None
        self._save()
        self.dashboard.target_finished(self.state, target)

    def _record(self, target: TargetState) -> TargetRecord:
        best = target.best
        return TargetRecord(
            experiments=target.experiments,
            consecutive_reverts=target.consecutive_reverts,
            seconds=target.seconds,
            visit_seconds=target.visit_seconds,
            visit_budget_seconds=target.visit_budget_seconds,
            speedup_vs_eager=best.speedup_vs_eager if best else None,
            speedup_vs_compile=best.speedup_vs_compile if best else None,
            pct_peak=best.pct_peak_best_known if best else None,
            timing_meaningful=target.timing_meaningful,
            agent_exhausted=target.agent_exhausted,
        )

    # -- experiments ------------------------------------------------------------------------------
    def _position(self, target: TargetState) -> int:
        """Where `target` sits in the run's target list (state.current and the journal use
        this; `target.index` is its place in the plan, which --only/--skip make different)."""
        return next(i for i, t in enumerate(self.state.targets) if t is target)

    def _plan_target(self, target: TargetState) -> Target:
        return self.plan.targets[target.index]

    def _history_of(self, target: TargetState) -> list[Attempt]:
        if target.index not in self._history:
            self._history[target.index] = [
                _attempt_from_row(r) for r in self.results.rows() if r.get("tag") == target.tag
            ]
        return self._history[target.index]

    def _reference_source(self, kernel_type: str) -> str:
        if kernel_type not in self._reference_sources:
            from autokernel import reference

            function = reference.REFERENCES[kernel_type]
            self._reference_sources[kernel_type] = inspect.getsource(function)
        return self._reference_sources[kernel_type]

    def _context(self, target: TargetState) -> AgentContext:
        return AgentContext(
            target=self._plan_target(target),
            device=self.config.device,
            gpu_summary=self._gpu_summary(target),
            best_source=self.ws.read_kernel(),
            reference_source=self._reference_source(target.kernel_type),
            history=list(self._history_of(target)),
            best=BenchResult.from_dict(target.best_result) if target.best_result else None,
            experiment=self.state.next_experiment,
            workspace=str(self.ws.root),
        )

    def _gpu_summary(self, target: TargetState) -> str:
        where = self.plan.gpu or ("CPU (Triton interpreter; timings not meaningful)"
                                  if self.config.device == "cpu" else "unknown GPU")
        best = target.best
        if best is None or best.latency_us is None:
            return f"{where}; no passing kernel yet"
        peak = best.pct_peak_best_known
        basis = "measured ceiling" if best.pct_peak_measured is not None else "datasheet"
        at_peak = f", {peak:.0f}% of the {basis} roofline" if peak is not None else ""
        return f"{where}; best so far {_speedups_text(best)}{at_peak}"

    def _run_baseline(self, target: TargetState) -> None:
        try:
            source = self.starter_source(target.kernel_type)
        except (FileNotFoundError, KeyError, NotImplementedError) as exc:
            target.status = "done"
            target.stop_rule, target.stop_reason = "no-starter", f"no starter kernel: {exc}"
            self.state.current = None
            self._save()
            self.dashboard.message(f"skipping {target.tag}: {target.stop_reason}")
            return
        proposal = Proposal(source=source, description=f"baseline: the {target.kernel_type} "
                            "starter", agent="starter")
        self._start_experiment(target, proposal, baseline=True)
        failed = self._last_result
        if (target.baseline is not None and failed is not None and not failed.passed
                and failed.stage == "harness"):
            # The harness itself cannot judge this target (e.g. a shape or dtype it refuses):
            # every experiment would fail the same way.
            self._finish_target(target, Decision(True, "harness-error",
                                                 f"harness-error: {failed.reason}"))

    def _run_agent_experiment(self, target: TargetState) -> None:
        started = self.clock()
        try:
            proposal = self.agent.propose(self._context(target))
        except AgentStop:
            raise
        except Exception as exc:  # an agent bug must not end the night
            proposal = Proposal(source="", description="agent error",
                                error=f"{type(exc).__name__}: {exc}")
        if proposal is None:
            target.agent_exhausted = True
            why = getattr(self.agent, "last_message", "") or "nothing left worth trying"
            self.dashboard.message(f"{target.tag}: the agent reports its search exhausted ({why})")
            self._save()
            return
        if proposal.error:
            self._record_agent_failure(target, proposal, self.clock() - started)
            return
        self._start_experiment(target, proposal, baseline=False,
                               spent_before=self.clock() - started)

    def _record_agent_failure(self, target: TargetState, proposal: Proposal,
                              seconds: float) -> None:
        """A proposal without a kernel: a failed experiment with no harness run, journaled like
        any other so that a kill between the row and the state write cannot count it twice."""
        self.state.in_flight = InFlight(
            experiment=self.state.next_experiment, target=self._position(target), phase="benchmarked",
            source="", verdict="fail", verdict_reason=sanitize(proposal.error),
            seconds_before=seconds, **proposal_fields(proposal, self.agent.name),
        )
        self._save()
        self._continue_in_flight()

    def _start_experiment(self, target: TargetState, proposal: Proposal, *, baseline: bool,
                          spent_before: float = 0.0) -> None:
        fields = proposal_fields(proposal, self.agent.name if not baseline else "starter")
        self.state.in_flight = InFlight(
            experiment=self.state.next_experiment,
            target=self._position(target),
            phase="written",
            source=proposal.source,
            baseline=baseline,
            tunables=_tunables_of(proposal.source),
            bench_attempts=1,
            seconds_before=spent_before,
            **fields,
        )
        self._save()
        self.ws.write_kernel(proposal.source)
        self._continue_in_flight(proposal)

    def _continue_in_flight(self, proposal: Proposal | None = None) -> None:
        """Take the journaled experiment from its phase to the end (also used by repair)."""
        flight = self.state.in_flight
        assert flight is not None
        target = self.state.targets[flight.target]
        started = self.clock()
        if flight.phase == "written":
            # The harness runs candidates in their own session: a Ctrl-C in the terminal reaches
            # only this process, so the verdict below is the kernel's, also when stopping.
            result, decision = self._judge(target, flight)
            flight.result = result.to_dict()
            flight.verdict, flight.verdict_reason = decision.status, decision.reason
            if decision.vs_best is not None:
                flight.vs_best = [decision.vs_best.estimate, decision.vs_best.low,
                                  decision.vs_best.high]
            flight.seconds_before += self.clock() - started
            started = self.clock()
            flight.phase = "benchmarked"
            self._save()
        # None: the agent produced no kernel, so no harness ran.
        result = BenchResult.from_dict(flight.result) if flight.result else None
        if flight.phase == "benchmarked" and flight.verdict in COMMITTED_STATUSES:
            assert result is not None
            if self.ws.read_kernel() != flight.source:
                self.ws.write_kernel(flight.source)
            flight.commit = self.ws.commit_paths(self._commit_message(target, flight, result),
                                                 [KERNEL_FILE])
            flight.phase = "committed"
            self._save()
        seconds = flight.seconds_before + (self.clock() - started)
        row = self._row(target, flight.experiment, _fields_of_flight(flight), result,
                        flight.verdict or "fail", flight.verdict_reason,
                        commit=flight.commit or "", seconds=seconds,
                        stage=(result.stage or "") if result is not None else "agent",
                        tunables=flight.tunables, vs_best=flight.vs_best)
        if not self.results.has(flight.experiment):
            if flight.result:
                self.ws.write_verdict(flight.experiment, flight.result)
            self.results.append(row)
        if flight.verdict not in COMMITTED_STATUSES:
            self.ws.reset_to(self.state.head)
        self._last_result = result
        self._conclude(target, flight.experiment, row, result, flight.sweep)
        if proposal is not None and result is not None:
            try:
                self.agent.observe(proposal, result, flight.verdict == "keep")
            except Exception as exc:  # learning is best-effort; the night goes on
                self.dashboard.message(f"agent.observe failed: {type(exc).__name__}: {exc}")

    def _judge(self, target: TargetState, flight: InFlight) -> tuple[BenchResult, KeepVerdict]:
        """The harness's verdict and the keep rule's. A candidate is first screened with the
        quick shape sweep (every detector, fewer shapes to compile for); only one the keep rule
        would keep, or whose paired estimate clears the margin, pays for the full sweep, which
        then decides, with fresh paired timings."""
        weights = shape_weights(self._plan_target(target), self._timed_shapes(target))
        if flight.baseline:
            result = self._bench(target, baseline=True)
            return result, KeepVerdict("baseline", result.reason if not result.passed else "")
        screen = self.config.screen and not self.config.harness_quick
        result = self._bench(target, quick=screen)
        decision = verdict_for(result, measure(result, flight.experiment, "", weights),
                               target.best, self.config.min_keep_margin, weights)
        if not screen or not result.passed:
            return result, decision
        # A screen times fewer rounds, so a real but small win can miss the bound there: any
        # candidate whose estimate clears the margin gets the full harness's verdict too.
        promising = (decision.vs_best is not None
                     and decision.vs_best.estimate > 1.0 + self.config.min_keep_margin)
        if decision.status != "keep" and not promising:
            return result, KeepVerdict(decision.status, decision.reason + " [quick screen]",
                                       decision.vs_best)
        screened_s = result.harness_seconds or 0.0
        result = self._bench(target)
        if result.harness_seconds is not None:
            result.harness_seconds = round(result.harness_seconds + screened_s, 3)
        decision = verdict_for(result, measure(result, flight.experiment, "", weights),
                               target.best, self.config.min_keep_margin, weights)
        return result, KeepVerdict(decision.status, decision.reason + " [promising on the quick "
                                   "screen; this verdict is the full harness's]", decision.vs_best)

    def _timed_shapes(self, target: TargetState) -> list[list[int]]:
        plan_target = self._plan_target(target)
        shapes = [list(plan_target.bench_shape)]
        for shape in plan_target.shapes:
            if list(shape) not in shapes:
                shapes.append(list(shape))
        return shapes[: max(1, self.config.max_shapes)]

    def _bench(self, target: TargetState, *, baseline: bool = False,
               quick: bool = False) -> BenchResult:
        plan_target = self._plan_target(target)
        timeout = self.config.bench_timeout_s
        if baseline:
            # The first run of a target also compiles and caches the torch.compile baselines.
            timeout = max(3 * timeout, 180.0)
        bench = self.bench or default_bench()
        cache = self.ws.cache_dir / "harness"
        cache.mkdir(parents=True, exist_ok=True)
        try:
            return _call_bench(
                bench, self.ws.kernel_path,
                device=self.config.device,
                shapes=self._timed_shapes(target),
                dtypes=[plan_target.dtype],
                # Correct at the dtype the model runs (each extra dtype is another compile per
                # candidate); None: every dtype the op supports.
                correctness_dtypes=None if self.config.check_all_dtypes else [plan_target.dtype],
                model_shapes=[list(s) for s in plan_target.shapes],
                params=dict(plan_target.params),
                timeout_s=timeout,
                cache_dir=cache,
                quick=quick or self.config.harness_quick,
                timing_budget_s=self.config.timing_budget_s,
                incumbent=None if baseline else self._incumbent_file(target),
                min_gain=self.config.min_keep_margin,
            )
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # a harness failure is recorded, never fatal to the run
            return BenchResult(status=Status.CRASH, stage="harness",
                               reason=f"the harness failed: {type(exc).__name__}: {exc}",
                               kernel_type=target.kernel_type, device=self.config.device)

    def _incumbent_file(self, target: TargetState) -> Path | None:
        """The target's best kernel, for the harness to time in the same rounds as the
        candidate; None while nothing passes."""
        if target.best is None or not target.best.passed:
            return None
        path = self.ws.cache_dir / "incumbent.py"
        path.write_text(self._best_source_of(target), encoding="utf-8")
        return path

    def _commit_message(self, target: TargetState, flight: InFlight,
                        result: BenchResult) -> str:
        new = measure(result, flight.experiment, "",
                      shape_weights(self._plan_target(target), self._timed_shapes(target)))
        figures = _speedups_text(new, None if flight.baseline else target.best)
        if not result.passed:
            figures = f"{result.status.value}: {result.reason}"
        note = " [cpu interpreter timing]" if not result.timing_meaningful else ""
        return sanitize(f"exp {flight.experiment} {target.tag}: {flight.description} — "
                        f"{figures}{note}", 400)

    def _row(self, target: TargetState, experiment: int, fields: dict[str, Any],
             result: BenchResult | None, status: str, reason: str, *, commit: str,
             seconds: float, stage: str, tunables: dict[str, Any],
             vs_best: list[float] | None = None) -> ResultRow:
        plan_target = self._plan_target(target)
        objective = None
        if result is not None and result.passed:
            objective = measure(result, experiment, commit,
                                shape_weights(plan_target, self._timed_shapes(target))).latency_us
        return ResultRow(
            experiment=experiment,
            tag=target.tag,
            kernel_type=target.kernel_type,
            status=status,
            phase=ResultRow.phase_of(status, bool(fields.get("sweep"))),
            # ERROR: no kernel to judge (the agent produced none); RightNow's tools count it failed.
            correctness=result.status.value if result is not None else "ERROR",
            description=fields.get("description", ""),
            target_rank=target.rank,
            shape="x".join(str(d) for d in plan_target.bench_shape),
            dtype=plan_target.dtype,
            agent=fields.get("agent", ""),
            throughput_tflops=result.tflops if result else None,
            latency_us=result.latency_us if result else None,
            pct_peak=result.pct_peak_datasheet if result else None,
            speedup_vs_pytorch=result.speedup_vs_eager if result else None,
            peak_vram_mb=result.peak_vram_mb if result else None,
            speedup_vs_compile=result.speedup_vs_compile if result else None,
            pct_peak_measured=result.pct_peak_measured if result else None,
            objective_us=objective,
            vs_best=vs_best[0] if vs_best else None,
            vs_best_lo=vs_best[1] if vs_best else None,
            vs_best_hi=vs_best[2] if vs_best else None,
            launch_us=result.launch_us if result else None,
            eager_launch_us=result.eager_launch_us if result else None,
            seconds=round(seconds, 3),
            harness_seconds=result.harness_seconds if result else None,
            commit=commit,
            input_tokens=int(fields.get("input_tokens") or 0),
            output_tokens=int(fields.get("output_tokens") or 0),
            cost_usd=fields.get("cost_usd"),
            stage=stage,
            reason=sanitize(reason),
            tunables=tunables,
            launch_digest=(result.launch_digest or "") if result else "",
        )

    def _conclude(self, target: TargetState, experiment: int, row: ResultRow,
                  result: BenchResult | None, sweep: bool) -> None:
        """Update the target's figures, clear the journal, and advance: one atomic write."""
        status = row.status
        if status == "baseline":
            m = measure(result, experiment, row.commit,
                        shape_weights(self._plan_target(target), self._timed_shapes(target))) \
                if result is not None else None
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
                target.best = measure(result, experiment, row.commit, shape_weights(
                    self._plan_target(target), self._timed_shapes(target))) if result else None
                target.best_commit = row.commit
                self.state.head = row.commit
                target.best_result = result.to_dict() if result is not None else None
            elif not sweep:  # a sweep step is part of one idea, not an idea that failed
                target.consecutive_reverts += 1
        target.input_tokens += row.input_tokens
        target.output_tokens += row.output_tokens
        target.cost_usd += row.cost_usd or 0.0
        self.state.in_flight = None
        self.state.next_experiment = experiment + 1
        self._save()
        history = self._history_of(target)
        if not history or history[-1].experiment != experiment:
            history.append(_attempt_from_row(_row_cells(row)))
        self.dashboard.experiment(self.state, target, row)

    # -- repair -----------------------------------------------------------------------------------
    def repair(self) -> None:
        """Bring the workspace back to a consistent state after any interruption."""
        self.ws.remove_stale_lock()
        self.results = ResultsLog.open(self.ws.results_path)
        flight = self.state.in_flight
        if flight is not None:
            self._repair_in_flight(flight)
        for target in self.state.targets:
            if target.status == "finishing":
                self._repair_finish(target)
            elif target.status == "reopening":
                self._repair_reopen(target)
        if self.state.in_flight is None:
            self._adopt_or_reset_head()
        self.check_consistency()
        flight = self.state.in_flight
        if flight is not None:  # an experiment that still needs its harness run
            self.dashboard.message(
                f"resuming experiment {flight.experiment} at phase {flight.phase}"
            )
            self._continue_in_flight()

    def _repair_in_flight(self, flight: InFlight) -> None:
        head = self.ws.head()
        if flight.phase == "benchmarked" and flight.verdict in COMMITTED_STATUSES:
            # Killed between `git commit` and journaling it: the commit is there; adopt it.
            if (head != self.state.head
                    and self.ws.head_message().startswith(f"exp {flight.experiment} ")
                    and self.ws.parent_of(head) == self.state.head):
                flight.commit, flight.phase = head, "committed"
                self._save()
        if flight.phase == "written":
            self.ws.reset_to(self.state.head)
            if self.results.has(flight.experiment):
                raise RunInconsistent(
                    f"experiment {flight.experiment} is in results.tsv but was never benchmarked"
                )
            if flight.bench_attempts >= 2:
                # Killed twice while benchmarking this candidate: it takes the run down with it.
                flight.result = BenchResult(
                    status=Status.CRASH, stage="harness",
                    reason="the run was killed twice while this candidate was being benchmarked",
                    kernel_type=self.state.targets[flight.target].kernel_type,
                    device=self.config.device).to_dict()
                flight.verdict = "baseline" if flight.baseline else "crash"
                flight.verdict_reason = flight.result["reason"]
                flight.phase = "benchmarked"
            else:
                flight.bench_attempts += 1
                self.ws.write_kernel(flight.source)
            self._save()
        elif flight.phase == "committed":
            if not self.ws.is_on_branch(flight.commit or ""):
                raise RunInconsistent(f"the commit of experiment {flight.experiment} "
                                      f"({flight.commit}) is not on the branch")
            if self.ws.head() != flight.commit:
                raise RunInconsistent(f"HEAD moved past experiment {flight.experiment}'s commit")
            self.ws.reset_to(flight.commit)
        else:  # benchmarked, not committed (a revert or failure, or a keep not committed yet)
            self.ws.reset_to(self.state.head)
        if self.state.targets[flight.target].status != "active":
            raise RunInconsistent(f"experiment {flight.experiment} belongs to a target that is "
                                  "not active")
        self.state.current = flight.target

    def _repair_finish(self, target: TargetState) -> None:
        head = self.ws.head()
        self.state.current = self._position(target)
        if (head != self.state.head and self.ws.head_message().startswith(f"finish {target.tag}")
                and self.ws.parent_of(head) == self.state.head):
            self.state.head = head
            if target.best is not None and target.best.passed:
                target.kernel_file = f"{KERNELS_DIR}/{target.tag}.py"
            target.status = "done"
            self.state.current = None
            self._save()
            return
        self.ws.reset_to(self.state.head)
        self._complete_finish(target)

    def _repair_reopen(self, target: TargetState) -> None:
        head = self.ws.head()
        self.state.current = self._position(target)
        if (head != self.state.head and self.ws.head_message().startswith(f"revisit {target.tag}")
                and self.ws.parent_of(head) == self.state.head):
            self._complete_reopen(target, head)
            return
        self.ws.reset_to(self.state.head)
        self._reopen(target)

    def _adopt_or_reset_head(self) -> None:
        head = self.ws.head()
        if head != self.state.head and not self.ws.is_on_branch(self.state.head):
            raise RunInconsistent(
                f"the branch no longer contains the last kept commit {self.state.head[:12]}"
            )
        # Anything past the last kept commit was never recorded as kept: drop it.
        self.ws.reset_to(self.state.head)

    def check_consistency(self) -> None:
        """results.tsv rows 0..N-1 each once; every kept row's commit on the branch; HEAD is the
        last kept commit."""
        rows = self.results.rows()
        numbers = [int(r["experiment"]) for r in rows]
        expected_count = self.state.next_experiment
        if self.state.in_flight is not None and self.results.has(self.state.in_flight.experiment):
            expected_count += 1
        if numbers != list(range(expected_count)):
            raise RunInconsistent(
                f"results.tsv holds experiments {_ranges(numbers)}, "
                f"expected 0..{expected_count - 1}"
            )
        for row in rows:
            if row.get("status") in COMMITTED_STATUSES and not self.ws.is_on_branch(row["commit"]):
                raise RunInconsistent(
                    f"experiment {row['experiment']} was kept as {row['commit'][:12]}, "
                    "which is not on the branch"
                )
        if self.state.in_flight is None and self.ws.head() != self.state.head:
            raise RunInconsistent("HEAD is not the last kept commit")

    def _abort_in_flight(self) -> None:
        """Second Ctrl-C: drop an experiment that has not been benchmarked yet."""
        flight = self.state.in_flight
        if flight is None or flight.phase != "written":
            return  # later phases are finished by `resume` from the journal
        self.state.in_flight = None
        try:
            self.ws.reset_to(self.state.head)
        except Exception:  # resume's repair resets the tree anyway
            pass


def proposal_fields(proposal: Proposal, agent_name: str) -> dict[str, Any]:
    return {
        "sweep": bool(proposal.sweep),
        "description": sanitize(proposal.description or "(no description)", 300),
        "agent": proposal.agent or agent_name,
        "hypothesis": sanitize(proposal.hypothesis, 300),
        "input_tokens": proposal.input_tokens,
        "output_tokens": proposal.output_tokens,
        "cost_usd": proposal.cost_usd,
    }


def _fields_of_flight(flight: InFlight) -> dict[str, Any]:
    return {
        "sweep": flight.sweep,
        "description": flight.description,
        "agent": flight.agent,
        "input_tokens": flight.input_tokens,
        "output_tokens": flight.output_tokens,
        "cost_usd": flight.cost_usd,
    }


def _row_cells(row: ResultRow) -> dict[str, str]:
    from autokernel.loop.results import COLUMNS

    cells = row.to_line().rstrip("\n").split("\t")
    return dict(zip(COLUMNS, cells))


def _ranges(numbers: list[int]) -> str:
    if not numbers:
        return "none"
    if len(numbers) > 8:
        return f"{numbers[:4]}…{numbers[-4:]} ({len(numbers)} rows)"
    return str(numbers)


def _packaged_starter(kernel_type: str) -> str:
    from autokernel.kernels import starter_path

    return starter_path(kernel_type).read_text(encoding="utf-8")


def run_summary(state: RunState) -> list[str]:
    """A few lines per target for the end of `autokernel run` (the report adds the rest)."""
    lines = []
    for t in state.targets:
        best = t.best
        figures = _speedups_text(best) if best is not None else "no passing kernel"
        lines.append(f"{t.tag}: {t.status}, {t.experiments} experiments, {t.keeps} kept, "
                     f"{figures}" + (f" — {t.stop_reason}" if t.stop_reason else ""))
    return lines


__all__ = [
    "LoopConfig",
    "Runner",
    "RunInconsistent",
    "WorkspaceError",
    "measure",
    "row_summary",
    "run_summary",
    "shape_weights",
]
