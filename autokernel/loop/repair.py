"""Crash repair: bring an interrupted workspace back to a state consistent with results.tsv and
the branch, from the journal in state.json (`autokernel.loop.journal`), before anything else runs.

Each journaled step is either finished (its commit is there: adopt it) or undone (reset the tree
to the last kept commit and do it again); an experiment killed twice while benchmarking is
recorded as a crash instead of being run a third time.
"""

from __future__ import annotations

from autokernel.harness.result import BenchResult, Status
from autokernel.loop.journal import Journal, RunInconsistent
from autokernel.loop.results import COMMITTED_STATUSES, ResultsLog
from autokernel.loop.schedule import position_of
from autokernel.loop.state import InFlight, TargetState
from autokernel.loop.workspace import KERNELS_DIR


def repair(journal: Journal) -> None:
    """Bring the workspace back to a consistent state after any interruption."""
    ws, state = journal.ws, journal.state
    ws.remove_stale_lock()
    journal.results = ResultsLog.open(ws.results_path)
    flight = state.in_flight
    if flight is not None:
        _repair_in_flight(journal, flight)
    for target in state.targets:
        if target.status == "finishing":
            _repair_finish(journal, target)
        elif target.status == "reopening":
            _repair_reopen(journal, target)
    if state.in_flight is None:
        _adopt_or_reset_head(journal)
    check_consistency(journal)
    flight = state.in_flight
    if flight is not None:  # an experiment that still needs its harness run
        journal.dashboard.message(
            f"resuming experiment {flight.experiment}, which the interruption left "
            + ("before the harness judged it: judging it now" if flight.phase == "written"
               else "judged but not recorded: recording its verdict")
        )
        journal.continue_in_flight()


def _repair_in_flight(journal: Journal, flight: InFlight) -> None:
    ws, state = journal.ws, journal.state
    head = ws.head()
    if flight.phase == "benchmarked" and flight.verdict in COMMITTED_STATUSES:
        # Killed between `git commit` and journaling it: the commit is there; adopt it.
        if (head != state.head
                and ws.head_message().startswith(f"exp {flight.experiment} ")
                and ws.parent_of(head) == state.head):
            flight.commit, flight.phase = head, "committed"
            journal.save()
    if flight.phase == "written":
        ws.reset_to(state.head)
        if journal.results.has(flight.experiment):
            raise RunInconsistent(
                f"experiment {flight.experiment} is in results.tsv but was never benchmarked"
            )
        if flight.bench_attempts >= 2:
            # Killed twice while benchmarking this candidate: it takes the run down with it.
            flight.result = BenchResult(
                status=Status.CRASH, stage="harness",
                reason="the run was killed twice while this candidate was being benchmarked",
                kernel_type=state.targets[flight.target].kernel_type,
                device=journal.config.device).to_dict()
            flight.verdict = "baseline" if flight.baseline else "crash"
            flight.verdict_reason = flight.result["reason"]
            flight.phase = "benchmarked"
        else:
            flight.bench_attempts += 1
            ws.write_kernel(flight.source)
        journal.save()
    elif flight.phase == "committed":
        if not ws.is_on_branch(flight.commit or ""):
            raise RunInconsistent(f"the commit of experiment {flight.experiment} "
                                  f"({flight.commit}) is not on the branch")
        if ws.head() != flight.commit:
            raise RunInconsistent(f"HEAD moved past experiment {flight.experiment}'s commit")
        ws.reset_to(flight.commit)
    else:  # benchmarked, not committed (a revert or failure, or a keep not committed yet)
        ws.reset_to(state.head)
    if state.targets[flight.target].status != "active":
        raise RunInconsistent(f"experiment {flight.experiment} belongs to a target that is "
                              "not active")
    state.current = flight.target


def _repair_finish(journal: Journal, target: TargetState) -> None:
    ws, state = journal.ws, journal.state
    head = ws.head()
    state.current = position_of(state, target)
    if (head != state.head and ws.head_message().startswith(f"finish {target.tag}")
            and ws.parent_of(head) == state.head):
        state.head = head
        if target.best is not None and target.best.passed:
            target.kernel_file = f"{KERNELS_DIR}/{target.tag}.py"
        target.status = "done"
        state.current = None
        journal.save()
        return
    ws.reset_to(state.head)
    journal.complete_finish(target)


def _repair_reopen(journal: Journal, target: TargetState) -> None:
    ws, state = journal.ws, journal.state
    head = ws.head()
    state.current = position_of(state, target)
    if (head != state.head and ws.head_message().startswith(f"revisit {target.tag}")
            and ws.parent_of(head) == state.head):
        journal.complete_reopen(target, head)
        return
    ws.reset_to(state.head)
    journal.reopen(target)


def _adopt_or_reset_head(journal: Journal) -> None:
    ws, state = journal.ws, journal.state
    head = ws.head()
    if head != state.head and not ws.is_on_branch(state.head):
        raise RunInconsistent(
            f"the branch no longer contains the last kept commit {state.head[:12]}"
        )
    # Anything past the last kept commit was never recorded as kept: drop it.
    ws.reset_to(state.head)


def check_consistency(journal: Journal) -> None:
    """results.tsv rows 0..N-1 each once; every kept row's commit on the branch; HEAD is the
    last kept commit."""
    ws, state, results = journal.ws, journal.state, journal.results
    rows = results.rows()
    numbers = [int(r["experiment"]) for r in rows]
    expected_count = state.next_experiment
    if state.in_flight is not None and results.has(state.in_flight.experiment):
        expected_count += 1
    if numbers != list(range(expected_count)):
        raise RunInconsistent(
            f"results.tsv holds experiments {_ranges(numbers)}, "
            f"expected 0..{expected_count - 1}"
        )
    for row in rows:
        if row.get("status") in COMMITTED_STATUSES and not ws.is_on_branch(row["commit"]):
            raise RunInconsistent(
                f"experiment {row['experiment']} was kept as {row['commit'][:12]}, "
                "which is not on the branch"
            )
    if state.in_flight is None and ws.head() != state.head:
        raise RunInconsistent("HEAD is not the last kept commit")


def _ranges(numbers: list[int]) -> str:
    if not numbers:
        return "none"
    if len(numbers) > 8:
        return f"{numbers[:4]}…{numbers[-4:]} ({len(numbers)} rows)"
    return str(numbers)
