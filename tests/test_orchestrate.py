"""The move-on rules: each fires on its own condition, says why, and can be switched off."""

from __future__ import annotations

import pytest

from autokernel.orchestrate import MoveOnConfig, TargetRecord, baseline_speedup, should_move_on

QUIET = TargetRecord(experiments=3, consecutive_reverts=1, seconds=60.0,
                     speedup_vs_eager=1.3, speedup_vs_compile=0.9, pct_peak=50.0)


def record(**changes: object) -> TargetRecord:
    fields = dict(QUIET.__dict__)
    fields.update(changes)
    return TargetRecord(**fields)  # type: ignore[arg-type]


def test_nothing_fires_on_a_target_that_is_still_progressing() -> None:
    decision = should_move_on(QUIET, MoveOnConfig())
    assert not decision.move_on and decision.rule is None and decision.fired == ()


@pytest.mark.parametrize(
    ("changes", "rule", "words"),
    [
        ({"agent_exhausted": True}, "exhausted", "nothing left"),
        ({"pct_peak": 91.0}, "peak", "91.0%"),
        ({"speedup_vs_eager": 5.0, "speedup_vs_compile": 2.1}, "speedup", "2.10×"),
        ({"consecutive_reverts": 5}, "plateau", "5 consecutive"),
        ({"seconds": 7200.0}, "time", "2.0 h on this target"),
        ({"visit_seconds": 301.0, "visit_budget_seconds": 300.0}, "time", "share"),
    ],
)
def test_each_rule_fires_alone_and_says_why(changes: dict, rule: str, words: str) -> None:
    decision = should_move_on(record(**changes), MoveOnConfig())
    assert decision.move_on and decision.rule == rule and decision.fired == (rule,)
    assert words in decision.reason


def test_rules_fire_exactly_at_their_thresholds() -> None:
    config = MoveOnConfig(max_consecutive_reverts=5, peak_fraction=0.9, target_seconds=7200,
                          target_speedup=2.0)
    assert not should_move_on(record(consecutive_reverts=4), config).move_on
    assert should_move_on(record(consecutive_reverts=5), config).rule == "plateau"
    assert not should_move_on(record(pct_peak=89.99), config).move_on
    assert should_move_on(record(pct_peak=90.0), config).rule == "peak"
    assert not should_move_on(record(seconds=7199.0), config).move_on
    assert not should_move_on(record(speedup_vs_eager=1.99, speedup_vs_compile=3.0),
                              config).move_on


def test_peak_rule_never_fires_when_timings_are_not_meaningful() -> None:
    on_cpu = record(pct_peak=99.0, timing_meaningful=False)
    assert not should_move_on(on_cpu, MoveOnConfig()).move_on


def test_speedup_is_against_the_faster_pytorch_baseline_by_default() -> None:
    # 3x over eager but slower than torch.compile: the kernel is not done.
    slow_vs_compile = record(speedup_vs_eager=3.0, speedup_vs_compile=0.8)
    assert baseline_speedup(slow_vs_compile, "best") == 0.8
    assert not should_move_on(slow_vs_compile, MoveOnConfig()).move_on
    eager_only = MoveOnConfig(speedup_baseline="eager")
    assert should_move_on(slow_vs_compile, eager_only).rule == "speedup"
    no_compile = record(speedup_vs_eager=2.5, speedup_vs_compile=None)
    assert should_move_on(no_compile, MoveOnConfig()).rule == "speedup"


def test_time_rule_counts_the_targets_own_clock_not_the_runs() -> None:
    # A target that just started late in a long run has its full budget.
    assert not should_move_on(record(seconds=10.0), MoveOnConfig(target_seconds=600)).move_on
    assert should_move_on(record(seconds=600.0), MoveOnConfig(target_seconds=600)).rule == "time"


def test_max_experiments_rule() -> None:
    config = MoveOnConfig(max_experiments=3)
    assert should_move_on(record(experiments=3), config).rule == "experiments"
    assert not should_move_on(record(experiments=2), config).move_on


def test_every_rule_can_be_switched_off() -> None:
    off = MoveOnConfig(max_consecutive_reverts=None, peak_fraction=None, target_seconds=None,
                       target_speedup=None, max_experiments=None)
    extreme = record(consecutive_reverts=99, pct_peak=99.0, seconds=1e6, experiments=999,
                     speedup_vs_eager=50.0, speedup_vs_compile=50.0)
    assert not should_move_on(extreme, off).move_on
    # ...except the agent saying it has nothing left: there is nothing to run then.
    assert should_move_on(record(agent_exhausted=True), off).rule == "exhausted"


def test_all_rules_that_fired_are_reported_in_order() -> None:
    decision = should_move_on(record(consecutive_reverts=9, pct_peak=95.0, seconds=8000.0),
                              MoveOnConfig())
    assert decision.fired == ("peak", "plateau", "time") and decision.rule == "peak"
    assert decision.reason.count(";") == 2


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError):
        MoveOnConfig(speedup_baseline="fastest")
    with pytest.raises(ValueError):
        MoveOnConfig(peak_fraction=1.5)
