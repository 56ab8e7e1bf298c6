"""In-context selection: which of a run's kernels make the whole model faster, by measurement.

A kernel that wins alone can still slow the model it is spliced into: its route costs host time
in an eager forward, it keeps Inductor from fusing its neighbours under torch.compile, or the
model calls it at other shapes than the one it was tuned at. So the kernels are judged where
they will run. For one delivery mode (eager, torch.compile), a *configuration* is the set of
kernels routed in, and `measure(configs)` times every configuration of a batch in the same
interleaved rounds (paired: whatever drifts between rounds hits all of them alike). Then:

1. in a set S, kernel i's effect is the paired speedup of S over S − {i} (time without it over
   time with it, per round; > 1: the kernel makes the model faster), a median of per-round
   ratios with a 95% bootstrap interval (`autokernel.harness.paired`);
2. a kernel *earns its place* in S when its removal slows the model beyond that noise in the
   mode's primary figure (the interval's low end above 1) and does not speed it up beyond the
   noise in the other figure (the interval's high end not below 1): a kernel that saves device
   time but costs more host time than that in a host-bound forward is out;
   A mode that replays a CUDA graph (no host cost per forward) is judged by device time
   alone;
3. the first batch holds no kernel, all of them (for the record) and each one alone; a kernel
   that does not earn its place alone (S = {i}) is out at once;
4. greedy drop from the rest: S and S minus each of its kernels are timed in a new paired batch
   (the empty configuration always in it as the anchor); while some kernel of S does not earn
   its place, the one with the lowest effect is dropped and the batch timed again.

So the chosen set is never measurably slower than no kernel at all, and every kernel in it was
measured to carry part of the gain. A configuration that fails to run (a kernel that does not
compile under Inductor, say) counts as infinitely slow: each kernel whose removal fixes it is
dropped first, with the error as the reason.

This module is the decision alone, so it is tested with made-up timings; the timing itself is
`in_context.py`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autokernel.harness.paired import PairedSpeedup, paired_speedup, round_ratios

Config = frozenset[str]
DEVICE, WALL = "device", "wall"
FIGURES = (DEVICE, WALL)

IN, OUT = "in", "out"
EARNS = "removing it slows the model beyond the paired noise"
NO_GAIN = "removing it does not slow the model beyond the paired noise"
COSTS_OTHER = "removing it makes the {other} time faster beyond the paired noise"
FAILS = "the model fails with it: {error}"
NOT_JUDGED_CPU = "routed: the CPU interpreter's timings say nothing, so nothing is left out"
FORCED = "routed: --all-kernels"


@dataclass
class ConfigRounds:
    """One configuration's per-round times in a batch (round r at index r, both figures), or the
    error that kept it from running."""

    rounds: dict[str, list[float]] = field(default_factory=dict)  # figure -> µs per round
    error: str | None = None

    def median_us(self, figure: str) -> float | None:
        values = sorted(self.rounds.get(figure) or [])
        if not values:
            return None
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


Batch = dict[Config, ConfigRounds]
Measure = Callable[[list[Config]], Batch]


@dataclass
class Effect:
    """Kernel i's effect in set S, from one paired batch: time of S − {i} over time of S."""

    speedup: dict[str, PairedSpeedup | None]  # figure -> paired speedup (> 1: i helps)
    with_us: dict[str, float | None]
    without_us: dict[str, float | None]
    error: str | None = None  # S fails to run (and S − {i} does not)

    def drop_order(self, primary: str) -> tuple[int, float]:
        """Greedy drops the lowest first: a kernel whose set fails before any other, the one
        whose removal leaves the fastest model first among those; then the lowest effect."""
        if self.error is not None:
            without = self.without_us.get(primary)
            return 0, without if without is not None else math.inf
        paired = self.speedup.get(primary)
        return 1, paired.estimate if paired is not None else -math.inf


@dataclass
class AblationRow:
    """One kernel in one delivery mode: the model's time with it and without it, the paired
    ratio with its interval, and the decision with its reason (one row of verify.json's
    `ablation` list)."""

    kernel: str
    mode: str
    decision: str  # IN or OUT
    reason: str
    with_set: list[str]
    with_us: dict[str, float | None]
    without_us: dict[str, float | None]
    speedup: dict[str, dict[str, float] | None]  # figure -> {estimate, low, high, rounds}
    alone_vs_none: dict[str, dict[str, float] | None]
    batch: int  # which batch the figures come from (1 = the first)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Ablation:
    mode: str
    primary: str
    candidates: list[str]
    chosen: list[str]
    rows: list[AblationRow]
    batches: int
    judged: bool  # False on the CPU or with --all-kernels: every kernel is in, undecided
    anchor: dict[str, float | None] = field(default_factory=dict)  # no kernel: median µs
    chosen_us: dict[str, float | None] = field(default_factory=dict)  # the chosen set
    vs_none: dict[str, dict[str, float] | None] = field(default_factory=dict)  # chosen vs none
    all_vs_none: dict[str, dict[str, float] | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # config label -> error

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "primary": self.primary, "candidates": self.candidates,
                "chosen": self.chosen, "batches": self.batches, "judged": self.judged,
                "anchor_us": self.anchor, "chosen_us": self.chosen_us,
                "chosen_vs_none": self.vs_none, "all_vs_none": self.all_vs_none,
                "errors": self.errors,
                "rows": [r.to_dict() for r in self.rows]}


def label(config: Iterable[str]) -> str:
    """A configuration as people read it: `none` or the tags joined by `+`."""
    tags = sorted(config)
    return "+".join(tags) if tags else "none"


def _paired(batch: Batch, slower: Config, faster: Config, figure: str
            ) -> PairedSpeedup | None:
    """Speedup of `faster` over `slower` (time of slower / time of faster, per round)."""
    a, b = batch.get(slower), batch.get(faster)
    if a is None or b is None or a.error or b.error:
        return None
    ratios = round_ratios(a.rounds.get(figure) or [], b.rounds.get(figure) or [])
    return paired_speedup([ratios]) if ratios else None


def _as_dict(paired: PairedSpeedup | None) -> dict[str, float] | None:
    if paired is None:
        return None
    return {"estimate": paired.estimate, "low": paired.low, "high": paired.high,
            "rounds": paired.rounds}


def _medians(batch: Batch, config: Config) -> dict[str, float | None]:
    """Each figure's median (and any other figure the batch measured, such as host time)."""
    found = batch.get(config)
    figures = list(FIGURES) + [f for f in (found.rounds if found else {}) if f not in FIGURES]
    return {f: (found.median_us(f) if found and not found.error else None) for f in figures}


def effect(batch: Batch, current: Config, kernel: str) -> Effect:
    without = current - {kernel}
    speedup = {f: _paired(batch, without, current, f) for f in FIGURES}
    failing = batch.get(current)
    error = failing.error if failing is not None and failing.error else None
    without_rounds = batch.get(without)
    if without_rounds is not None and without_rounds.error:
        error = None  # both fail: the removal fixes nothing, judged like no gain
    return Effect(speedup, _medians(batch, current), _medians(batch, without), error)


def verdict(found: Effect, primary: str, secondary: Sequence[str] | None = None
            ) -> tuple[str, str]:
    """IN or OUT for a kernel with this effect, and why (see the module doc, step 2).
    `secondary`: the figures a kept kernel must not make worse (default: the other one)."""
    if found.error is not None:
        return OUT, FAILS.format(error=found.error)
    main = found.speedup.get(primary)
    if main is None or main.low <= 1.0:
        return OUT, NO_GAIN
    others = [f for f in FIGURES if f != primary] if secondary is None else secondary
    for other in others:
        paired = found.speedup.get(other)
        if paired is not None and paired.high < 1.0:
            return OUT, COSTS_OTHER.format(other=other)
    return IN, EARNS


def _first_batch(candidates: Config) -> list[Config]:
    configs: list[Config] = [frozenset(), candidates]
    configs += [frozenset({tag}) for tag in sorted(candidates)]
    return list(dict.fromkeys(configs))  # in order, without repeats


def _greedy_batch(current: Config) -> list[Config]:
    configs: list[Config] = [frozenset(), current]
    configs += [current - {tag} for tag in sorted(current)]
    return list(dict.fromkeys(configs))


def ablate(mode: str, candidates: Sequence[str], measure: Measure, *, primary: str = WALL,
           secondary: Sequence[str] | None = None, judged: bool = True,
           forced_reason: str = FORCED) -> Ablation:
    """Choose the kernels of `candidates` to route in `mode` (see the module doc).

    `judged=False` (the CPU, or --all-kernels) times no kernel against all of them, for the
    record, and routes every kernel, with `forced_reason` as each row's reason."""
    everything = frozenset(candidates)
    configs = _first_batch(everything) if judged else list(dict.fromkeys([frozenset(),
                                                                          everything]))
    batch = first = measure(configs)
    batches = 1
    errors = {label(c): r.error for c, r in batch.items() if r.error}
    alone = {tag: effect(first, frozenset({tag}), tag) for tag in everything}
    rows: dict[str, AblationRow] = {}

    def row(tag: str, current: Config, found: Effect, decision: str, reason: str,
            number: int) -> AblationRow:
        return AblationRow(tag, mode, decision, reason, sorted(current), found.with_us,
                           found.without_us, {f: _as_dict(p) for f, p in found.speedup.items()},
                           {f: _as_dict(p) for f, p in alone[tag].speedup.items()}, number)

    if not judged:
        for tag in sorted(everything):
            rows[tag] = row(tag, everything, effect(first, everything, tag), IN, forced_reason, 1)
        current = everything
    else:  # step 1: a kernel that does not earn its place alone is out at once
        current = frozenset()
        for tag in sorted(everything):
            decision, reason = verdict(alone[tag], primary, secondary)
            if decision == OUT:
                rows[tag] = row(tag, frozenset({tag}), alone[tag], OUT, f"alone: {reason}", 1)
            else:
                current |= {tag}
        if len(current) == 1:  # its effect in the chosen set is its effect alone
            (tag,) = current
            rows[tag] = row(tag, current, alone[tag], IN, EARNS, 1)
    while judged and len(current) > 1:  # step 2: greedy drop, re-timed after each drop
        batch = measure(_greedy_batch(current))
        batches += 1
        errors.update({label(c): r.error for c, r in batch.items() if r.error})
        effects = {tag: effect(batch, current, tag) for tag in current}
        decided = {tag: verdict(found, primary, secondary) for tag, found in effects.items()}
        losers = [tag for tag, (decision, _) in decided.items() if decision == OUT]
        if not losers:
            for tag in sorted(current):
                rows[tag] = row(tag, current, effects[tag], *decided[tag], batches)
            break
        worst = min(losers, key=lambda t: (effects[t].drop_order(primary), t))
        rows[worst] = row(worst, current, effects[worst], *decided[worst], batches)
        current = current - {worst}
        if len(current) == 1:
            (tag,) = current
            rows[tag] = row(tag, current, alone[tag], IN, EARNS, 1)
    final = batch if current in batch else first
    return Ablation(
        mode=mode, primary=primary, candidates=sorted(everything), chosen=sorted(current),
        rows=[rows[t] for t in sorted(rows)], batches=batches, judged=judged,
        anchor=_medians(final, frozenset()), chosen_us=_medians(final, current),
        vs_none={f: _as_dict(_paired(final, frozenset(), current, f)) for f in FIGURES},
        all_vs_none={f: _as_dict(_paired(first, frozenset(), everything, f)) for f in FIGURES},
        errors=errors)


def chosen_sets(ablations: Mapping[str, Ablation]) -> dict[str, list[str]]:
    """mode -> the kernels routed in it."""
    return {mode: list(a.chosen) for mode, a in ablations.items()}
