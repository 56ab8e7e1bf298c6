"""The tuner agent: a model-based search that must beat random search and learn from failures.

The objective here is synthetic (a known function of the tunables), so the tests run in well under
a second per search and can say exactly where the optimum is.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from typing import Any

import pytest

from autokernel.agents import AgentUnavailable, make_agent, resolve_agent_name
from autokernel.agents.base import AgentContext, Attempt
from autokernel.agents.tuner import TunerAgent
from autokernel.kernelfile import parse_kernel_source
from autokernel.profiling.plan import Target

SPACE = {
    "BLOCK": [16, 32, 64, 128, 256, 512, 1024, 2048],
    "WARPS": [1, 2, 4, 8, 16, 32],
    "STAGES": [1, 2, 3, 4, 5],
    "VARIANT": ["a", "b", "c"],
}
SOURCE = f'''"""A synthetic kernel file: only its tunables matter to these tests."""
KERNEL_TYPE = "softmax"
BACKEND = "triton"

BLOCK = 32
WARPS = 16
STAGES = 1
VARIANT = "a"
TUNABLE_SPACE = {SPACE!r}


def kernel_fn(x):
    return x
'''
OPTIMUM = {"BLOCK": 512, "WARPS": 4, "STAGES": 4, "VARIANT": "b"}
SPACE_SIZE = 8 * 6 * 5 * 3


def bowl(tunables: dict[str, Any]) -> float | None:
    """Latency in µs with a unique minimum at OPTIMUM; a corner of the space fails."""
    a = SPACE["BLOCK"].index(tunables["BLOCK"])
    b = SPACE["WARPS"].index(tunables["WARPS"])
    c = SPACE["STAGES"].index(tunables["STAGES"])
    if a + b >= 11:  # too many resources per program: the launch fails
        return None
    variant = {"a": 2.0, "b": 0.0, "c": 4.0}[tunables["VARIANT"]]
    return 10 + (a - 5) ** 2 + 1.5 * (b - 2) ** 2 + (c - 3) ** 2 + variant + 0.5 * abs(a - 5) * abs(
        c - 3
    )


TARGET = Target(
    rank=1, kernel_type="softmax", shapes=[[64, 128]], dtype="fp32", calls=1, time_ms=1.0,
    share=1.0, bench_shape=[64, 128], amdahl_2x=1.5, cumulative_2x=1.5,
)


def context(source: str, history: list[Attempt], experiment: int) -> AgentContext:
    return AgentContext(
        target=TARGET, device="cpu", gpu_summary="", best_source=source, reference_source="",
        history=history, best=None, experiment=experiment,
    )


def drive(
    agent: TunerAgent,
    objective: Callable[[dict[str, Any]], float | None],
    budget: int,
    source: str = SOURCE,
    stop_at_optimum: bool = True,
    digest: Callable[[dict[str, Any]], str] = lambda tunables: "",
) -> tuple[list[Attempt], int | None, str]:
    """Run the keep/revert loop with a synthetic harness; return the history, the experiment that
    first measured OPTIMUM (None if never) and the final best source."""
    start = parse_kernel_source(source).tunables
    best = objective(start)
    history = [Attempt(0, "baseline", "baseline", latency_us=best, tunables=start,
                       launch_digest=digest(start))]
    found = 0 if start == OPTIMUM else None
    for experiment in range(1, budget + 1):
        proposal = agent.propose(context(source, history, experiment))
        if proposal is None:
            break
        assert parse_kernel_source(proposal.source).tunables == proposal.tunables
        latency = objective(proposal.tunables)
        if latency is None:
            status = "crash"
        elif best is None or latency < best:
            status, best, source = "keep", latency, proposal.source
        else:
            status = "revert"
        history.append(Attempt(experiment, proposal.description, status, latency_us=latency,
                               tunables=proposal.tunables,
                               launch_digest=digest(proposal.tunables) if latency else ""))
        if found is None and proposal.tunables == OPTIMUM:
            found = experiment
            if stop_at_optimum:
                break
    return history, found, source


def test_finds_the_optimum_in_fewer_evaluations_than_random_search() -> None:
    evaluations = []
    for seed in range(5):
        _, found, _ = drive(TunerAgent(seed=seed), bowl, budget=250)
        assert found is not None, f"seed {seed}: the optimum was not found in 250 evaluations"
        evaluations.append(found)
    # Random search without replacement over the unmeasured configurations needs (n + 1) / 2
    # evaluations on average to hit one given configuration.
    random_mean = SPACE_SIZE / 2
    assert statistics.mean(evaluations) < 0.4 * random_mean, evaluations


def test_never_proposes_a_measured_configuration_twice() -> None:
    history, _, _ = drive(TunerAgent(seed=3), lambda t: bowl(t) or 1e9, budget=120,
                          stop_at_optimum=False)
    configs = [tuple(sorted(a.tunables.items())) for a in history]
    assert len(configs) == len(set(configs))


def launches(tunables: dict[str, Any]) -> str:
    """A launch digest in which STAGES and WARPS do nothing for VARIANT "a" (as NUM_STAGES does
    nothing in a single-pass kernel)."""
    if tunables["VARIANT"] == "a":
        return f"a/{tunables['BLOCK']}"
    return repr(sorted(tunables.items()))


def repeated_launches(history: list[Attempt]) -> int:
    seen: set[str] = set()
    repeats = 0
    for attempt in history:
        key = launches(attempt.tunables)
        repeats += key in seen
        seen.add(key)
    return repeats


def test_configurations_that_repeat_a_measured_kernel_come_last() -> None:
    # Variant "a" everywhere, so that only the inert tunables distinguish most candidates.
    def flat(tunables: dict[str, Any]) -> float:
        return 10.0 + SPACE["BLOCK"].index(tunables["BLOCK"]) + (tunables["VARIANT"] != "a")

    blind, informed = [], []
    for seed in range(4):
        history, _, _ = drive(TunerAgent(seed=seed), flat, budget=30, stop_at_optimum=False)
        blind.append(repeated_launches(history))
        history, _, _ = drive(TunerAgent(seed=seed), flat, budget=30, stop_at_optimum=False,
                              digest=launches)
        informed.append(repeated_launches(history))
    assert sum(informed) < 0.5 * sum(blind), (informed, blind)


def test_inert_tunables_are_learned_per_variant() -> None:
    from autokernel.agents.tuner import _InertTunables, _Observation
    from autokernel.agents.tuner_space import space_of

    space, start = space_of(SOURCE)
    config = space.encode(start)
    assert config is not None
    names = space.names
    stages, warps, variant = (names.index(n) for n in ("STAGES", "WARPS", "VARIANT"))
    other_stages = tuple(v + 1 if d == stages else v for d, v in enumerate(config))
    observations = [_Observation(config, 10.0, 0, "same"),
                    _Observation(other_stages, 10.1, 1, "same")]
    inert = _InertTunables(space, observations)
    fresh_warps = tuple(v + 1 if d == warps else v for d, v in enumerate(config))
    third_stage = tuple(v + 2 if d == stages else v for d, v in enumerate(config))
    assert inert.repeats_measured(third_stage)  # differs only in STAGES: seen to do nothing
    assert not inert.repeats_measured(fresh_warps)  # WARPS was never seen to do nothing
    in_b = tuple(v + 1 if d == variant else v for d, v in enumerate(third_stage))
    assert not inert.repeats_measured(in_b)  # another variant: nothing known there
    assert inert.first_fresh([third_stage, fresh_warps]) == [fresh_warps, third_stage]
    # A failed configuration has no launches to compare.
    failed = [_Observation(config, 10.0, 0, "same"), _Observation(other_stages, None, 1, "same")]
    assert not _InertTunables(space, failed).repeats_measured(third_stage)


def test_learns_to_avoid_a_failing_region() -> None:
    def variant_c_crashes(tunables: dict[str, Any]) -> float | None:
        return None if tunables["VARIANT"] == "c" else bowl(tunables)

    agent = TunerAgent(seed=1)
    history, _, _ = drive(agent, variant_c_crashes, budget=60, stop_at_optimum=False)
    initial = 1 + agent.initial_neighbours + agent.initial_random
    later = [a for a in history[initial:]]
    assert len(later) >= 30
    share_c = sum(a.tunables["VARIANT"] == "c" for a in later) / len(later)
    # Random proposals would put a third of them in the failing variant.
    assert share_c < 0.12, share_c


def test_descriptions_name_the_changed_tunables_against_the_best() -> None:
    agent = TunerAgent(seed=0)
    start = parse_kernel_source(SOURCE).tunables
    history = [Attempt(0, "baseline", "baseline", latency_us=20.0, tunables=start)]
    proposal = agent.propose(context(SOURCE, history, 1))
    assert proposal is not None
    changed = {k: v for k, v in proposal.tunables.items() if start[k] != v}
    assert changed
    for name, value in changed.items():
        assert f"{name}={value!r}" in proposal.description or f"{name}={value}" in (
            proposal.description
        )
    unchanged = set(start) - set(changed)
    assert not any(f"{name}=" in proposal.description for name in unchanged)


def test_reports_exhausted_when_every_configuration_was_measured() -> None:
    small = SOURCE.replace(repr(SPACE), repr({"BLOCK": [32, 64], "WARPS": [16, 32],
                                              "STAGES": [1], "VARIANT": ["a"]}))
    agent = TunerAgent(seed=0)
    history, _, _ = drive(agent, lambda t: 1.0 + t["BLOCK"] / 100, budget=20, source=small)
    assert len(history) == 4  # baseline + the 3 other configurations
    assert agent.propose(context(small, history, 5)) is None
    assert "all 4 configurations" in agent.last_message


def test_reports_a_plateau_before_measuring_everything() -> None:
    start = parse_kernel_source(SOURCE).tunables

    def starter_is_best(tunables: dict[str, Any]) -> float:
        return 10.0 + sum(a != b for a, b in zip(tunables.values(), start.values()))

    agent = TunerAgent(seed=2, patience=12)
    history, _, _ = drive(agent, starter_is_best, budget=SPACE_SIZE)
    assert len(history) < SPACE_SIZE / 2
    assert "plateau" in agent.last_message
    measured = {tuple(sorted(a.tunables.items())) for a in history}
    for name, values in SPACE.items():  # every one-step neighbour of the best was measured
        index = values.index(start[name])
        for step in (-1, 1):
            if 0 <= index + step < len(values):
                neighbour = dict(start, **{name: values[index + step]})
                assert tuple(sorted(neighbour.items())) in measured


def test_no_tunables_means_nothing_to_propose() -> None:
    bare = 'KERNEL_TYPE = "softmax"\nBACKEND = "triton"\n\ndef kernel_fn(x):\n    return x\n'
    agent = TunerAgent()
    assert agent.propose(context(bare, [], 1)) is None
    assert "TUNABLE_SPACE" in agent.last_message


def test_every_proposal_is_a_point_of_the_space() -> None:
    agent = TunerAgent(seed=4)
    history, _, _ = drive(agent, bowl, budget=40, stop_at_optimum=False)
    for attempt in history:
        for name, value in attempt.tunables.items():
            assert value in SPACE[name]
    assert list(itertools.islice(history, 1))[0].status == "baseline"


def test_make_agent_auto_uses_the_tuner_without_an_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    name, note = resolve_agent_name("auto")
    assert name == "tuner" and "ANTHROPIC_API_KEY" in note
    assert isinstance(make_agent("auto", seed=7), TunerAgent)
    with pytest.raises(AgentUnavailable, match="the tuner agent does not take not_a_tuner_option"):
        make_agent("auto", seed=7, not_a_tuner_option=1)
    with pytest.raises(AgentUnavailable, match="ANTHROPIC_API_KEY"):
        make_agent("claude")
    with pytest.raises(AgentUnavailable, match="unknown agent"):
        make_agent("gpt")


def test_make_agent_auto_falls_back_when_the_claude_agent_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import autokernel.agents as agents

    def missing() -> None:
        raise AgentUnavailable("the Claude agent cannot be loaded (anthropic is not installed)")

    monkeypatch.setattr(agents, "_claude_factory", missing)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    name, note = resolve_agent_name("auto")
    assert name == "tuner" and "falling back" in note and "anthropic" in note
    assert isinstance(make_agent("auto"), TunerAgent)
    with pytest.raises(AgentUnavailable, match="anthropic"):
        make_agent("claude")


def test_without_the_claude_extra_auto_is_the_tuner_and_claude_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None
                        if name == "anthropic" else real_find_spec(name, *args))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    name, note = resolve_agent_name("auto")
    assert name == "tuner" and "autokernel[claude]" in note
    with pytest.raises(AgentUnavailable, match=r"pip install 'autokernel\[claude\]'"):
        make_agent("claude")


def test_only_the_initial_design_is_marked_as_a_sweep() -> None:
    agent = TunerAgent(seed=6)
    start = parse_kernel_source(SOURCE).tunables
    history = [Attempt(0, "baseline", "baseline", latency_us=bowl(start), tunables=start)]
    flags = []
    for experiment in range(1, 12):
        proposal = agent.propose(context(SOURCE, history, experiment))
        assert proposal is not None
        flags.append((proposal.sweep, proposal.hypothesis))
        latency = bowl(proposal.tunables)
        history.append(Attempt(experiment, proposal.description,
                               "crash" if latency is None else "revert", latency_us=latency,
                               tunables=proposal.tunables))
    initial = agent.initial_neighbours + agent.initial_random
    assert all(sweep and why.startswith("initial design") for sweep, why in flags[:initial])
    assert not any(sweep for sweep, _ in flags[initial:])
    assert all("surrogate" in why or "exploration" in why for _, why in flags[initial:])
