"""Does seeding a tuner sweep help? Harness calls until within 1% of the best, with and without.

Two sweeps of the same new structure (`lookup.sweep_scenario`), each answered by `LookupHarness`:
- *unseeded*: the tuner as the hybrid ran it before sweeps were seeded, from the starter alone;
- *seeded*: the same tuner with `SweepSeeds`: the configurations `suggest_configs` picks (a fixed
  rule written from program.md's advice, which sees the table's configurations but none of its
  latencies) measured first, and the previous structure's results as the warm start.

Both search only the configurations the table holds (`TunerAgent(restrict_to=...)`): anything else
has no measured figure, and a sweep spending its calls on configurations nobody measured would
count table gaps, not search. Both are driven like the hybrid drives a sweep: the best so far is the
file the next proposal edits. Every arm counts the same thing, the `LookupHarness` calls of the
sweep, the starter's own measurement included, until one configuration within `tolerance` of the
structure's best is measured (1: the starter already was); one that ends (plateau, no candidate
left) or reaches `max_calls` first is counted as having measured every configuration (the cost of
an exhaustive sweep) and reported as not reached. The seeds cost no call (the prior results were
measured by an earlier sweep; the suggestions come with the LLM's proposal).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autokernel.agents.base import AgentContext, Attempt
from autokernel.agents.bench.lookup import LookupHarness, Scenario, kernel_source
from autokernel.agents.tuner import TunerAgent
from autokernel.agents.tuner_seeds import SweepSeeds, stall_reason
from autokernel.profiling.plan import Target

H100_SMS = 132  # the table's GPU (sweep.md): the rule aims at a few waves of programs on it
SUGGESTIONS = 5  # Proposal.suggested_configs holds at most 5 (base.MAX_SUGGESTED_CONFIGS)
STALL_AFTER, STALL_GAIN = 8, 0.01  # the hybrid's stall stop, checked after the fact
# The hybrid's own ends of a sweep (`hybrid_stops=True`): its cap (max_sweep_experiments), and
# per arm the stop of its own code: a seeded sweep's stall stop (STALL_AFTER without a STALL_GAIN
# gain), the unseeded sweep's patience before the seeding (8 measurements without a faster one).
MAX_SWEEP_EXPERIMENTS, UNSEEDED_PATIENCE = 24, 8


def _outside(value: float, low: float, high: float) -> float:
    return max(0.0, low - value, value - high)


def rule_score(kernel_type: str, shape: tuple[int, ...], config: Mapping[str, Any],
               draft: Mapping[str, Any]) -> float:
    """How far `config` is from program.md's advice (0 = follows all of it; lower is better).

    §4-5: a row that fits is loaded whole (BLOCK_N = next_power_of_2(N)); 8-64 elements per
    thread; short rows: several rows per program so each moves enough bytes (here >= 2048
    elements); at least 2-4 waves of programs; NUM_STAGES does nothing for loop-free kernels (left
    as drafted). Ties go to the configuration with fewer changes from the draft.
    """
    warps = config.get("NUM_WARPS", 4)
    if kernel_type == "rotary_embedding":
        batch, heads, seq, dim = shape
        per_program = config["BLOCK_S"] * config["HEADS_PER_PROGRAM"] * dim
        programs = batch * math.ceil(heads / config["HEADS_PER_PROGRAM"]) * math.ceil(
            seq / config["BLOCK_S"])
        block_penalty, rows_penalty = 0.0, 0.0
    else:
        n = shape[-1]
        rows = config.get("ROWS_PER_PROGRAM", 1)
        block = config.get("BLOCK_N", 1 << max(0, (n - 1).bit_length()))
        per_program = rows * block
        programs = math.prod(shape[:-1]) / rows
        block_penalty = abs(math.log2(block) - max(0, (n - 1).bit_length()))
        rows_penalty = _outside(math.log2(rows * n), 11, 30)
    per_thread = per_program / (32 * warps)
    score = (block_penalty + rows_penalty + _outside(math.log2(per_thread), 3, 6)
             + _outside(math.log2(max(programs, 1)), math.log2(2 * H100_SMS), 40))
    changes = sum(1 for name, value in config.items() if draft.get(name) != value)
    return score + 0.01 * changes


def suggest_configs(scenario: Scenario, count: int = SUGGESTIONS) -> list[dict[str, Any]]:
    """The rule's `count` best configurations of the scenario's space (latencies unseen)."""
    entry = scenario.entry
    ranked = sorted((config for config, _ in scenario.rows),
                    key=lambda c: rule_score(entry.kernel_type, entry.shape, c, scenario.starter))
    return [c for c in ranked if c != scenario.starter][:count]


@dataclass
class SweepRun:
    calls: int  # harness calls, the starter's included, until within tolerance (or the cap)
    reached: bool
    stalled_first: bool  # the stall stop (8 calls without a 1% gain) would have ended it before


# (suggested configurations, warm start, adaptive turns). "seeded" is the plain-turns design of
# tuner-seeding-37788e8.md; the tuner's default is adaptive turns (tuner-seeding-993c50e.md).
ARMS: dict[str, tuple[bool, bool, bool]] = {
    "unseeded": (False, False, False), "seeded": (True, True, False),
    "seeded, adaptive turns": (True, True, True),
    "suggested only": (True, False, False), "warm start only": (False, True, False),
}


def run_sweep(scenario: Scenario, *, arm: str, seed: int, tolerance: float = 0.01,
              max_calls: int | None = None, hybrid_stops: bool = False) -> SweepRun:
    """One sweep of the scenario's structure; see the module docstring for what is counted.
    `hybrid_stops`: the sweep also ends where the hybrid would end it (MAX_SWEEP_EXPERIMENTS,
    and the arm's own stall or patience rule); one ended before the goal counts as not reached."""
    suggest, warm, adaptive = ARMS[arm]
    seeded = suggest or warm
    entry = scenario.entry
    harness = LookupHarness(scenario.rows)
    cap = max_calls if max_calls is not None else len(scenario.rows)
    if hybrid_stops:
        cap = min(cap, 1 + MAX_SWEEP_EXPERIMENTS)  # the starter, then the sweep's experiments
    goal = scenario.best_us * (1.0 + tolerance)
    best_us = harness.latency(scenario.starter)
    assert best_us is not None, "the starter must be in the table"
    source = kernel_source(entry.kernel_type, scenario.space, scenario.starter)
    history = [Attempt(0, "baseline", "baseline", latency_us=best_us,
                       tunables=dict(scenario.starter))]
    latencies: list[float | None] = [best_us]
    tuner = TunerAgent(seed=seed, restrict_to=[c for c, _ in scenario.rows],
                       adaptive_turns=adaptive)
    seeds = (SweepSeeds(suggested=suggest_configs(scenario) if suggest else [],
                        prior=scenario.prior if warm else [],
                        stall_after=STALL_AFTER if hybrid_stops else None,
                        min_gain=STALL_GAIN) if seeded else None)
    # The unseeded arm's patience (hybrid_stops), as the hybrid counted it before the seeding:
    # measurements since the sweep's own fastest, the first of the sweep always resetting it.
    since_faster, sweep_best = 0, None
    target = Target(rank=1, kernel_type=entry.kernel_type, shapes=[list(entry.shape)],
                    dtype="fp16", calls=1, time_ms=1.0, share=1.0, bench_shape=list(entry.shape),
                    amdahl_2x=1.0, cumulative_2x=1.0)
    stalled_first = False
    for call in range(1, cap + 1):
        if best_us <= goal:
            return SweepRun(harness.calls, True, stalled_first)
        context = AgentContext(target=target, device="cuda", gpu_summary="", best_source=source,
                               reference_source="", history=history, best=None, experiment=call)
        proposal = tuner.propose(context, seeds) if seeded else tuner.propose(context)
        if proposal is None:
            break
        latency = harness.latency(proposal.tunables)
        kept = latency is not None and latency < best_us
        if latency is not None and (sweep_best is None or latency < sweep_best):
            since_faster, sweep_best = 0, latency
        else:
            since_faster += 1
        history.append(Attempt(call, proposal.description,
                               "fail" if latency is None else "keep" if kept else "revert",
                               latency_us=latency, tunables=dict(proposal.tunables),
                               hypothesis=proposal.hypothesis))
        latencies.append(latency)
        if kept:
            best_us, source = latency, proposal.source  # type: ignore[assignment]
        stalled_first = stalled_first or bool(stall_reason(latencies, STALL_AFTER, STALL_GAIN))
        if latency is not None and latency <= goal:
            return SweepRun(harness.calls, True, stalled_first)
        if hybrid_stops and not seeded and since_faster >= UNSEEDED_PATIENCE:
            break
    return SweepRun(len(scenario.rows), False, stalled_first)


def summarize(runs: list[SweepRun]) -> dict[str, Any]:
    calls = [r.calls for r in runs]
    return {"median_calls": statistics.median(calls), "mean_calls": statistics.fmean(calls),
            "reached": sum(r.reached for r in runs), "runs": len(runs),
            "stalled_before_reaching": sum(r.stalled_first for r in runs)}


def compare(scenarios: list[Scenario], seeds: list[int], tolerance: float = 0.01,
            max_calls: int | None = None, arms: tuple[str, ...] = ("unseeded", "seeded"),
            hybrid_stops: bool = False) -> dict[str, Any]:
    """The sweeps `arms` of every scenario over `seeds`: per scenario and overall figures."""
    per_target = []
    every: dict[str, list[SweepRun]] = {arm: [] for arm in arms}
    for scenario in scenarios:
        runs_of = {arm: [run_sweep(scenario, arm=arm, seed=s, tolerance=tolerance,
                                   max_calls=max_calls, hybrid_stops=hybrid_stops)
                         for s in seeds] for arm in every}
        for arm, runs in runs_of.items():
            every[arm] += runs
        per_target.append({
            "target": scenario.entry.label, "structure": scenario.structure,
            "configurations": len(scenario.rows), "prior_results": len(scenario.prior),
            "starter_us": scenario.starter_us, "best_us": scenario.best_us,
            "suggested": suggest_configs(scenario),
            **{arm: summarize(runs) | {"calls": [r.calls for r in runs]}
               for arm, runs in runs_of.items()},
        })
    overall = {arm: summarize(runs) for arm, runs in every.items()}
    for arm in every:
        if arm != "unseeded" and "unseeded" in every:
            overall[arm] |= {
                "mean_call_reduction": 1.0 - (overall[arm]["mean_calls"]
                                              / overall["unseeded"]["mean_calls"]),
                "median_call_reduction": 1.0 - (overall[arm]["median_calls"]
                                                / max(1e-9, overall["unseeded"]["median_calls"]))}
    return {"tolerance": tolerance, "seeds": seeds, "targets": per_target, "overall": overall,
            "hybrid_stops": hybrid_stops}
