"""When to stop working on a target and move to the next one: the move-on rules.

A pure function of one target's record and the run's configuration, so every rule is unit-tested
without a GPU, a harness or an agent. The loop (`autokernel.loop.runner`) calls it before each
experiment and stores the rule that fired in the run state, results and report.

The rules, each configurable (None switches one off):

- exhausted: the agent reports that it has nothing left worth trying on this target;
- peak: the best kernel reaches `peak_fraction` of the GPU's ceiling for this op at this shape
  (the calibrated ceiling when the harness measured one, else the datasheet). Never on the CPU
  interpreter: its timings say nothing about a GPU, so a percentage of a GPU peak is meaningless;
- speedup: the best kernel is `target_speedup`× faster than the PyTorch baseline. The baseline is
  the *faster* of eager and torch.compile by default (`speedup_baseline="best"`): 2× over a slow
  eager path is often what the unoptimized starter already does, and stopping there would leave a
  kernel that loses to `torch.compile`;
- plateau: `max_consecutive_reverts` counted experiments in a row were not kept (reverted or
  failed). Counted are the rows results.tsv marks `phase=search`, the agent's own picks; the
  `explore` samples that teach the search the space (the tuner's initial design, its sweep of a
  structure Claude wrote) and the baseline are skipped, neither counting nor resetting. A keep
  of any phase resets the count to 0, and so does the start of each visit;
- time: the target's own clock (kept across resume, never the run's global clock) reached
  `target_seconds`, or this visit's share of the run's remaining `--hours`;
- experiments: `max_experiments` experiments (baseline excluded) ran on this target.
"""

from __future__ import annotations

from dataclasses import dataclass

from autokernel.text import format_duration

RULES: tuple[str, ...] = ("exhausted", "peak", "speedup", "plateau", "time", "experiments")
SPEEDUP_BASELINES: tuple[str, ...] = ("best", "eager", "compile")


@dataclass(frozen=True)
class MoveOnConfig:
    max_consecutive_reverts: int | None = 5
    peak_fraction: float | None = 0.9  # of the ceiling, 0..1
    target_seconds: float | None = 2 * 3600.0
    target_speedup: float | None = 2.0
    speedup_baseline: str = "best"  # best | eager | compile
    max_experiments: int | None = None

    def __post_init__(self) -> None:
        if self.speedup_baseline not in SPEEDUP_BASELINES:
            raise ValueError(
                f"speedup_baseline must be one of {', '.join(SPEEDUP_BASELINES)}; "
                f"got {self.speedup_baseline!r}"
            )
        if self.peak_fraction is not None and not 0 < self.peak_fraction <= 1:
            raise ValueError(f"peak_fraction must be in (0, 1]; got {self.peak_fraction}")


@dataclass(frozen=True)
class TargetRecord:
    """What the rules need to know about one target, as the run state keeps it."""

    experiments: int  # experiments after the baseline, on this target, over all visits
    consecutive_reverts: int  # non-kept `search` experiments since the last keep or visit start
    seconds: float  # the target's own clock, over all visits
    visit_seconds: float = 0.0  # time spent in the current visit
    visit_budget_seconds: float | None = None  # this visit's share of the run's remaining hours
    speedup_vs_eager: float | None = None  # of the best kernel so far
    speedup_vs_compile: float | None = None
    pct_peak: float | None = None  # of the best kernel, in %, calibrated ceiling if known
    timing_meaningful: bool = True
    agent_exhausted: bool = False


@dataclass(frozen=True)
class Decision:
    move_on: bool
    rule: str | None = None  # the first of RULES that fired
    reason: str = ""  # one line for people: the rule and the numbers that made it fire
    fired: tuple[str, ...] = ()  # every rule that fired, in RULES order


def baseline_speedup(record: TargetRecord, baseline: str) -> float | None:
    """The best kernel's speedup over the chosen PyTorch baseline (None if unmeasured)."""
    if baseline == "eager":
        return record.speedup_vs_eager
    if baseline == "compile":
        return record.speedup_vs_compile
    measured = [s for s in (record.speedup_vs_eager, record.speedup_vs_compile) if s is not None]
    # Against the faster baseline, the speedup is the smaller of the two.
    return min(measured) if measured else None


def should_move_on(record: TargetRecord, config: MoveOnConfig) -> Decision:
    """Decide whether the loop leaves this target now, and why."""
    reasons: dict[str, str] = {}

    if record.agent_exhausted:
        reasons["exhausted"] = "exhausted: the agent has nothing left worth trying"

    if (
        config.peak_fraction is not None
        and record.timing_meaningful
        and record.pct_peak is not None
        and record.pct_peak >= 100.0 * config.peak_fraction
    ):
        reasons["peak"] = (
            f"peak: {record.pct_peak:.1f}% of the ceiling "
            f"(≥ {100.0 * config.peak_fraction:.0f}%)"
        )

    if config.target_speedup is not None:
        speedup = baseline_speedup(record, config.speedup_baseline)
        if speedup is not None and speedup >= config.target_speedup:
            against = {"best": "the faster of eager and torch.compile", "eager": "eager PyTorch",
                       "compile": "torch.compile"}[config.speedup_baseline]
            reasons["speedup"] = (
                f"speedup: {speedup:.2f}× over {against} (≥ {config.target_speedup:g}×)"
            )

    if (
        config.max_consecutive_reverts is not None
        and record.consecutive_reverts >= config.max_consecutive_reverts
    ):
        reasons["plateau"] = (
            f"plateau: {record.consecutive_reverts} consecutive experiments not kept "
            f"(limit {config.max_consecutive_reverts})"
        )

    if config.target_seconds is not None and record.seconds >= config.target_seconds:
        reasons["time"] = (
            f"time: {format_duration(record.seconds)} on this target "
            f"(limit {format_duration(config.target_seconds)})"
        )
    elif (
        record.visit_budget_seconds is not None
        and record.visit_seconds >= record.visit_budget_seconds
    ):
        reasons["time"] = (
            f"time: its {format_duration(record.visit_budget_seconds)} share of the run's "
            f"time left is spent ({format_duration(record.visit_seconds)})"
        )

    if config.max_experiments is not None and record.experiments >= config.max_experiments:
        reasons["experiments"] = (
            f"experiments: {record.experiments} on this target (limit {config.max_experiments})"
        )

    fired = tuple(rule for rule in RULES if rule in reasons)
    if not fired:
        return Decision(move_on=False)
    return Decision(
        move_on=True, rule=fired[0], reason="; ".join(reasons[r] for r in fired), fired=fired
    )
