"""The initial design of a seeded tuner sweep: one short list from every source of knowledge.

An unseeded sweep starts from the starter's one-step neighbours and a few random configurations.
A seeded one (`TunerAgent.propose(context, seeds=SweepSeeds(...))`) knows more, from three sources
whose worth for a new structure nobody can tell in advance:

- **the surrogate**, warm-started: fitted on the earlier structures' results and whatever this
  sweep has measured (once that holds good and bad examples), it ranks the usual candidates
  (`TunerAgent._candidates`: neighbours and perturbations of the best measured and best prior
  configurations, random ones);
- **the LLM's suggestions**, which saw the new structure's source;
- **the starter's one-step neighbours**: cheap local moves that win whenever the new structure's
  best is close to how it was drafted (a draft's values are a guess that is often nearly right).

Rather than spending its first calls on one source (the old design measured all suggestions before
anything else, and the warm start skipped the neighbours), the seeded design takes turns: the
next configuration comes from the next source in `SOURCE_ORDER` (suggestion, surrogate,
neighbour, suggestion, ...). Suggestions keep the LLM's order (its own ranking); the warm start's
and the neighbours' picks are the best by the current surrogate's P(good), refitted after every
measurement, so later picks already learn from the earlier ones (without a surrogate: the
neighbours in random order). Taking turns bounds the cost of a useless source: with k sources the
first hit of a useful one comes at most k times later than if it had gone alone. A source with
nothing left (no surrogate while nothing tells good from bad; no suggestions) passes its turn on.

By default the turns adapt (`adaptive_order`, play-the-winner): a source whose pick improved the
sweep's best keeps the turn, one whose pick did not passes it on, and the neighbour source steps
from the best so far (from the starter once that neighbourhood is measured). So a useless source
costs one call per round, and a winning local move is followed by the next one at once
(`TunerAgent(adaptive_turns=False)`: plain turns, as measured in tuner-seeding-37788e8.md).

After `TunerAgent.seeded_design` measurements (6: two turns of each source) the model-guided phase
takes over, the warm start still in the surrogate. There, a suggestion not yet measured stays a
candidate with a bonus on its P(good) (`SUGGESTION_BONUS`): the LLM saw the new source, the
surrogate did not. A suggestion that the earlier structure measured itself and did not find good
(failed, or outside its good quantile) gets no bonus and, in the design, comes after the other
suggestions: that is direct evidence against the guess.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autokernel.agents.tuner_seeds import SUGGESTED_WHY, PriorPoint
from autokernel.agents.tuner_space import Config, TunableSpace

SUGGESTION_BONUS = 0.25  # on P(good); the LLM saw the new structure's source, the surrogate didn't
# The LLM first: it saw the new structure's source; the warm start only another structure's results.
SOURCE_ORDER = ("suggested", "surrogate", "neighbour")
DESIGN_WHY = {
    "surrogate": "initial design (seeded): the surrogate's best candidate",
    "suggested": SUGGESTED_WHY,
    "neighbour": "initial design (seeded): one step from",  # + the point it steps from
}

Scorer = Callable[[list[Config]], list[float]]  # P(good) of each configuration


@dataclass(frozen=True)
class DesignPick:
    config: Config
    why: str


def suggestion_bonus(suggested: Sequence[Config],
                     prior: Sequence[PriorPoint]) -> dict[Config, float]:
    """The bonus of each suggested configuration: none for one the earlier structure measured and
    found not good (failed, or outside its good quantile)."""
    bad_before = {p.config for p in prior if not p.good}
    good_before = {p.config for p in prior if p.good}
    return {c: (0.0 if c in bad_before and c not in good_before else SUGGESTION_BONUS)
            for c in suggested}


def source_of(why: str) -> str | None:
    """Which source picked a design point, from the hypothesis it was proposed with (the loop's
    history keeps it, so a resumed sweep credits its sources as before); None: not a design pick."""
    for name, text in DESIGN_WHY.items():
        if why.startswith(text):
            return name
    return None


def rotated(first: int) -> list[str]:
    first %= len(SOURCE_ORDER)
    return list(SOURCE_ORDER[first:] + SOURCE_ORDER[:first])


def adaptive_order(record: Sequence[tuple[str | None, bool]]) -> list[str]:
    """The sources in the order they are asked for the next design point, play-the-winner style.

    `record` holds, per design point measured so far, the source that picked it and whether it
    improved the sweep's best. A source whose pick improved the best keeps the turn (its next pick
    builds on that win: the neighbour source then steps from the new best); one whose pick did not
    loses it to the next source in `SOURCE_ORDER`. A useless source so costs one call per round
    instead of a third of the design, and a useful one is exploited at once. An unattributed record
    (history without hypotheses) falls back to plain turns."""
    if not record:
        return rotated(0)
    source, improved = record[-1]
    if source is None:
        return rotated(len(record))
    here = SOURCE_ORDER.index(source)
    return rotated(here if improved else here + 1)


def next_design_pick(
    *,
    turn: int,
    space: TunableSpace,
    starter: Config,
    suggested: Sequence[Config],
    prior: Sequence[PriorPoint],
    warm_candidates: Callable[[], list[Config]],
    score: Scorer | None,
    visited: set[Config],
    skip: Callable[[Config], bool],
    rng: random.Random,
    order: Sequence[str] | None = None,
    centre_label: str = "the starter",
) -> DesignPick | None:
    """The seeded design's configuration for measurement number `turn` (0-based) of the sweep, or
    None when every source is empty. `order`: the sources in the order they are asked
    (`adaptive_order`); None takes plain turns by `turn`. `starter` is where the neighbour source
    steps from, `centre_label` what it is in the pick's reason ("the starter", "the best so
    far"). `score` is None while no surrogate can be fitted (one class only): then suggestions
    keep the LLM's order and neighbours a random one. `skip` tells a configuration that would only
    launch a measured kernel again (the tuner's inert tunables)."""
    bonus = suggestion_bonus(suggested, prior)
    sources: dict[str, list[Config]] = {
        "surrogate": [],
        "suggested": [c for c in suggested if c not in visited and space.contains(c)],
        "neighbour": [c for c in space.neighbours(starter) if c not in visited],
    }
    rng.shuffle(sources["neighbour"])  # the order among equals when nothing else ranks them
    if score is not None:
        sources["surrogate"] = [c for c in warm_candidates() if c not in visited]
    for name in order if order is not None else rotated(turn):
        configs = [c for c in sources[name] if not skip(c)] or sources[name]
        if not configs:
            continue
        if name == "suggested":
            # The LLM's order is its own ranking; one the earlier structure found bad drops down.
            ranked = sorted(configs, key=lambda c: -bonus.get(c, 0.0))  # stable
            return DesignPick(ranked[0], DESIGN_WHY[name])
        why = f"{DESIGN_WHY[name]} {centre_label}" if name == "neighbour" else DESIGN_WHY[name]
        if score is None:
            return DesignPick(configs[0], why)
        scores = score(configs)
        best = max(range(len(configs)), key=lambda i: (scores[i], -i))
        return DesignPick(configs[best], f"{why} (P(good)={scores[best]:.2f})")
    return None
