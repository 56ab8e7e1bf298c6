"""In-context selection's decision (`integrate/ablation.py`), on made-up per-round timings.

The model's time in a configuration (a set of kernels) is made additive: a base time plus each
routed kernel's own effect, per figure, with the same round-to-round drift for every
configuration of a round (what the pairing cancels) and a little independent noise.
"""

from __future__ import annotations

import random

import pytest

from autokernel.integrate.ablation import (
    DEVICE,
    IN,
    OUT,
    WALL,
    Config,
    ConfigRounds,
    ablate,
    label,
)

ROUNDS = 40


def fake_measure(effects: dict[str, dict[str, float]], base: float = 1000.0,
                 failing: set[Config] = frozenset(), noise: float = 0.002,
                 seen: list[list[Config]] | None = None):
    """measure(configs) for a model whose time is base + the sum of each kernel's effect (µs,
    negative: faster), per figure; configs in `failing` raise."""
    rng = random.Random(7)

    def measure(configs: list[Config]) -> dict[Config, ConfigRounds]:
        if seen is not None:
            seen.append(list(configs))
        drifts = [1.0 + 0.05 * rng.random() for _ in range(ROUNDS)]  # shared within a round
        batch = {}
        for config in configs:
            if config in failing:
                batch[config] = ConfigRounds(error="InductorError: boom")
                continue
            rounds = {}
            for figure in (DEVICE, WALL):
                mean = base + sum(effects[t][figure] for t in config)
                rounds[figure] = [mean * d * (1 + noise * rng.gauss(0, 1)) for d in drifts]
            batch[config] = ConfigRounds(rounds)
        return batch

    return measure


def decisions(result) -> dict[str, str]:
    return {row.kernel: row.decision for row in result.rows}


def test_a_kernel_stays_only_where_its_removal_slows_the_model() -> None:
    effects = {"01_fast": {DEVICE: -80.0, WALL: -60.0},     # 6% faster: in
               "02_slow": {DEVICE: +40.0, WALL: +50.0},     # slower: out
               "03_nothing": {DEVICE: 0.0, WALL: 0.0},      # no gain within the noise: out
               "04_also_fast": {DEVICE: -30.0, WALL: -30.0}}
    result = ablate("eager", list(effects), fake_measure(effects))
    assert decisions(result) == {"01_fast": IN, "02_slow": OUT, "03_nothing": OUT,
                                 "04_also_fast": IN}
    assert result.chosen == ["01_fast", "04_also_fast"]
    rows = {row.kernel: row for row in result.rows}
    assert rows["02_slow"].reason.startswith("alone:")  # out at once, from the first batch
    kept = rows["01_fast"]
    assert kept.with_set == ["01_fast", "04_also_fast"] and kept.batch == 2
    assert kept.speedup[WALL]["low"] > 1.0 and kept.speedup[WALL]["estimate"] == pytest.approx(
        (1000 - 90 + 60) / (1000 - 90), rel=0.01)
    assert result.vs_none[WALL]["estimate"] == pytest.approx(1000 / 910, rel=0.01)
    assert result.all_vs_none[WALL]["estimate"] == pytest.approx(1000 / 960, rel=0.01)


def test_a_kernel_that_saves_device_time_but_costs_wall_time_is_out() -> None:
    effects = {"01_host_bound": {DEVICE: -50.0, WALL: +40.0}}
    result = ablate("eager", list(effects), fake_measure(effects))
    assert result.chosen == [] and "alone" in result.rows[0].reason
    # With device time as the primary figure the same kernel is out too: it costs wall time.
    device_first = ablate("eager", list(effects), fake_measure(effects), primary=DEVICE)
    assert device_first.chosen == [] and "wall time faster" in device_first.rows[0].reason
    # Replayed from a CUDA graph, the forward has no host cost: judged by device time alone,
    # the same kernel is in.
    graph = ablate("cuda-graph", list(effects), fake_measure(effects), primary=DEVICE,
                   secondary=())
    assert graph.chosen == ["01_host_bound"] and graph.rows[0].reason.startswith("removing")


def test_greedy_drop_removes_a_kernel_that_only_helps_alone() -> None:
    # 02 helps alone, but with 01 in the model it is redundant (their gains overlap): the
    # additive fake cannot say that, so the overlap is a failing pair instead.
    effects = {"01_a": {DEVICE: -60.0, WALL: -60.0}, "02_b": {DEVICE: -20.0, WALL: -20.0}}
    seen: list[list[Config]] = []
    both = frozenset({"01_a", "02_b"})
    result = ablate("compile", list(effects),
                    fake_measure(effects, failing={both}, seen=seen))
    assert result.chosen == ["01_a"]
    rows = {row.kernel: row for row in result.rows}
    assert rows["02_b"].decision == OUT and "fails with it" in rows["02_b"].reason
    assert "InductorError" in rows["02_b"].reason and label(both) in result.errors
    assert len(seen) == 2 and all(frozenset() in batch for batch in seen)  # the anchor


def test_a_kernel_that_fails_to_run_alone_is_out_with_the_error() -> None:
    effects = {"01_broken": {DEVICE: -50.0, WALL: -50.0}}
    result = ablate("compile", ["01_broken"],
                    fake_measure(effects, failing={frozenset({"01_broken"})}))
    assert result.chosen == [] and "InductorError: boom" in result.rows[0].reason


@pytest.mark.parametrize("reason", ["routed: --all-kernels", "routed: the CPU"])
def test_unjudged_selection_routes_every_kernel_after_one_small_batch(reason: str) -> None:
    effects = {"01_slow": {DEVICE: 50.0, WALL: 50.0}, "02_fast": {DEVICE: -50.0, WALL: -50.0}}
    seen: list[list[Config]] = []
    result = ablate("eager", list(effects), fake_measure(effects, seen=seen), judged=False,
                    forced_reason=reason)
    assert result.chosen == ["01_slow", "02_fast"] and not result.judged
    assert {row.reason for row in result.rows} == {reason}
    assert seen == [[frozenset(), frozenset(effects)]]  # no kernel and all of them, no more


def test_noise_wider_than_the_gain_keeps_nothing() -> None:
    effects = {"01_tiny": {DEVICE: -3.0, WALL: -3.0}}  # 0.3% in 5% round-to-round noise
    result = ablate("eager", ["01_tiny"], fake_measure(effects, noise=0.05))
    assert result.chosen == []
