"""Which target the loop works on: targets in Amdahl order, each once; then, while the run has
time, revisit rounds for targets that stopped on a plateau or on their time share, continuing
from their best kernel. Also the record `autokernel.orchestrate.should_move_on` judges."""

from __future__ import annotations

from autokernel.loop.config import LoopConfig
from autokernel.loop.state import RunState, TargetState
from autokernel.orchestrate import Decision, TargetRecord

# Stop rules after which a target is worth another visit when the run has time left.
REVISIT_RULES = frozenset({"plateau", "time", "hours", "stopped"})


def position_of(state: RunState, target: TargetState) -> int:
    """Where `target` sits in the run's target list (state.current and the journal use this;
    `target.index` is its place in the plan, which --only/--skip make different)."""
    return next(i for i, t in enumerate(state.targets) if t is target)


def current_target(state: RunState) -> TargetState | None:
    if state.current is None:
        return None
    target = state.targets[state.current]
    return target if target.status == "active" else None


def pending_targets(state: RunState) -> list[TargetState]:
    return [t for t in state.targets if t.status == "pending"]


def queue_revisits(state: RunState, config: LoopConfig) -> list[TargetState]:
    """Queue (mark pending) the targets worth another visit, as a new round; [] when none."""
    if not config.revisit or state.hours is None:
        return []
    this_round = [t for t in state.targets if t.stops
                  and t.stops[-1].get("round") == state.visit_round]
    if this_round and not any(t.stops[-1].get("keeps", 0) for t in this_round):
        state.rounds_without_keep += 1
    else:
        state.rounds_without_keep = 0
    if state.rounds_without_keep >= config.max_rounds_without_keep:
        return []
    limit = config.move_on.target_seconds
    eligible = [
        t for t in state.targets
        if t.status == "done" and t.stop_rule in REVISIT_RULES and t.baseline is not None
        and (limit is None or t.seconds < limit)
    ]
    if not eligible:
        return []
    state.visit_round += 1
    for t in eligible:
        t.status = "pending"
    return eligible


def begin_visit(state: RunState, target: TargetState, budget_seconds: float | None) -> None:
    """Make `target` current with fresh per-visit counters."""
    target.visit_budget_seconds = budget_seconds
    target.visits += 1
    target.visit_seconds = 0.0
    target.visit_keeps = 0
    target.consecutive_reverts = 0
    target.agent_exhausted = False
    target.stop_rule, target.stop_reason = None, ""
    state.current = position_of(state, target)


def primary_reason(decision: Decision) -> str:
    """The first rule's reason, naming any other rule that fired with it, rather than every
    reason run together ("plateau: …; time: …")."""
    reason = decision.reason
    others = decision.fired[1:]
    if others:
        # Each rule's reason starts with "rule: " and they are joined with "; ".
        reason = reason.split(f"; {others[0]}: ", 1)[0]
        reason += f" (also: {', '.join(others)})"
    return reason


def note_stop(state: RunState, target: TargetState, decision: Decision) -> None:
    """Record why the target's visit ended (revisit rounds read this); the visit's entry keeps
    every fired rule's reason."""
    target.stop_rule, target.stop_reason = decision.rule, primary_reason(decision)
    target.stops.append({
        "round": state.visit_round, "visit": target.visits, "rule": decision.rule,
        "reason": decision.reason, "experiments": target.experiments,
        "keeps": target.visit_keeps, "seconds": round(target.visit_seconds, 1),
    })


def move_on_record(target: TargetState) -> TargetRecord:
    """What the move-on rules judge the target by."""
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
