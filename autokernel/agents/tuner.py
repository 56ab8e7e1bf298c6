"""The offline tuner: a model-based search over a kernel file's TUNABLE_SPACE.

It needs no network and no API key. Each proposal is a real edit of the current best `kernel.py`
(`autokernel.kernelfile.set_tunables`), so the loop runs, commits and reverts it like any other
agent's. Alternative implementations are searched too: they are tunables (`VARIANT`).

The search follows likelihood-free Bayesian optimization as Helion's LFBO pattern search uses it:

1. Initial design: the starter's own configuration (the target's experiment 0), up to eight of
   its one-step neighbours (cheap, likely wins that also teach the model the local slope: on the
   H100 a single step, NUM_WARPS 8 -> 4, was the best layernorm change at a ViT's shape) and a few
   random configurations, before any model is fitted. These are marked `sweep` (samples, not
   ideas), so the loop's consecutive-reverts rule does not count them.
2. A classifier surrogate (scikit-learn ExtraTrees) is refitted on every configuration measured on
   this target: "good" = latency within the best `good_quantile` of the passing ones (weighted by
   how far below the threshold), "bad" = the rest *and every configuration that failed, crashed,
   timed out or was rejected*, so the search learns where the space breaks.
3. Candidates: every one-step neighbour (±1 position in each tunable's ordered value list) of the
   best few configurations, random multi-dimension perturbations of them, and uniform random
   configurations; configurations already measured are never proposed again.
4. A small batch is picked by predicted P(good), greedily, each pick penalized by its similarity
   to the ones already picked (diversity), then proposed one by one.
5. Configurations that would only repeat a measured kernel are skipped. Two measured
   configurations with the same launch digest (the same compiled kernels, grids and arguments at
   the primary shape) show that the tunables they differ in do nothing there, e.g. NUM_STAGES of
   a single-pass kernel. Those tunables are then inert for that VARIANT; a candidate that
   differs from a measured configuration only in inert tunables is dropped from the queue and
   proposed only when nothing else is left.
6. The search reports itself exhausted when every configuration has been measured, or on a
   plateau: `patience` measurements without a new best *and* every one-step neighbour of the best
   already measured (a local optimum it has confirmed).

A sweep can be seeded (`propose(context, seeds=SweepSeeds(...))`, autokernel.agents.tuner_seeds):
its initial design then takes turns between the LLM's suggested configurations, the surrogate
(warm-started from the results of structures swept before) and one-step neighbours, a source that
improved the best keeping the turn (autokernel.agents.tuner_design); the model-guided phase
follows after a few points, and a stall rule ends the sweep. The tuner alone (`--agent tuner`)
passes no seeds.

The state is rebuilt from the loop's history on every call, so a resumed run continues the same
search without a separate checkpoint.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autokernel.agents.base import AgentContext, Attempt, Proposal
from autokernel.agents.tuner_design import (
    DesignPick, adaptive_order, next_design_pick, source_of, suggestion_bonus,
)
from autokernel.agents.tuner_seeds import PriorPoint, SweepSeeds, best_prior_configs, stall_reason
from autokernel.agents.tuner_space import Config, TunableSpace, space_of
from autokernel.harness.result import BenchResult
from autokernel.kernelfile import KernelFileError, set_tunables
from autokernel.loop.results import FAILED_STATUSES



@dataclass
class _Observation:
    config: Config
    latency_us: float | None  # None: the configuration failed
    experiment: int
    launch_digest: str = ""
    why: str = ""  # the hypothesis it was proposed with (which design source picked it)


class _InertTunables:
    """Which tunables were seen to change nothing, per value of VARIANT (step 5 of the search)."""

    def __init__(self, space: TunableSpace, observations: list[_Observation]) -> None:
        self.variant_dim = space.names.index("VARIANT") if "VARIANT" in space.names else None
        self.inert: dict[int | None, set[int]] = {}
        by_digest: dict[str, list[Config]] = {}
        for o in observations:
            if o.launch_digest and o.latency_us is not None:
                by_digest.setdefault(o.launch_digest, []).append(o.config)
        for configs in by_digest.values():
            for i, a in enumerate(configs):
                for b in configs[i + 1:]:
                    differing = {d for d, (x, y) in enumerate(zip(a, b)) if x != y}
                    if self.variant_dim in differing:
                        continue  # two implementations that launch alike say nothing general
                    self.inert.setdefault(self._variant(a), set()).update(differing)
        self.measured = [o.config for o in observations]

    def _variant(self, config: Config) -> int | None:
        return None if self.variant_dim is None else config[self.variant_dim]

    def repeats_measured(self, config: Config) -> bool:
        inert = self.inert.get(self._variant(config))
        if not inert:
            return False
        for seen in self.measured:
            differing = {d for d, (x, y) in enumerate(zip(config, seen)) if x != y}
            if differing <= inert and self._variant(seen) == self._variant(config):
                return True
        return False

    def first_fresh(self, configs: list[Config]) -> list[Config]:
        """The configurations that may launch something new, then the rest (stable order)."""
        return sorted(configs, key=self.repeats_measured)


@dataclass
class _SweepState:
    """What one proposal's search works from: the space, what this sweep measured (and so must not
    propose again), the prior results of earlier structures, and the target's RNG."""

    space: TunableSpace
    observations: list[_Observation]
    visited: set[Config]
    rng: random.Random
    inert: _InertTunables
    prior: list[PriorPoint]


@dataclass
class _TargetSearch:
    """Per-target memory that is not in the history: the queued batch and the RNG."""

    rng: random.Random
    queue: list[tuple[Config, str]] = field(default_factory=list)  # (config, why)
    space_key: tuple[Any, ...] = ()
    seeds: SweepSeeds | None = None  # a new sweep (new seeds) starts a new search


class TunerAgent:
    """LFBO-style tuner. See the module docstring for the algorithm."""

    name = "tuner"
    # One instance serves every target (its search is keyed by target), and a proposal costs
    # milliseconds: a loop judging candidates in parallel (autokernel.parallel) may ask for the
    # next before the last is measured, naming the ones in flight in `sibling_drafts`.
    serves_many_targets = True

    def __init__(
        self,
        *,
        seed: int = 0,
        initial_neighbours: int = 8,
        initial_random: int = 4,
        good_quantile: float = 0.2,
        parents: int = 3,
        perturbations_per_parent: int = 24,
        random_candidates: int = 256,
        batch_size: int = 3,
        diversity_penalty: float = 0.25,
        patience: int = 20,
        n_estimators: int = 48,
        restrict_to: Sequence[Mapping[str, Any]] | None = None,
        seeded_design: int = 6,
        adaptive_turns: bool = True,
    ) -> None:
        self.seed = seed
        self.initial_neighbours = initial_neighbours
        self.initial_random = initial_random
        self.good_quantile = good_quantile
        self.parents = parents
        self.perturbations_per_parent = perturbations_per_parent
        self.random_candidates = random_candidates
        self.batch_size = batch_size
        self.diversity_penalty = diversity_penalty
        self.patience = patience
        self.n_estimators = n_estimators
        self.seeded_design = seeded_design  # a seeded sweep's initial design (tuner_design.py)
        # The design's sources take plain turns, or play-the-winner turns (adaptive_order).
        self.adaptive_turns = adaptive_turns
        # Only these configurations exist (a benchmark's lookup table): nothing else is proposed.
        self.restrict_to = list(restrict_to) if restrict_to is not None else None
        self._searches: dict[tuple[int, str], _TargetSearch] = {}
        self.last_message = ""  # why the last propose() returned None, for the loop to show

    # -- the Agent interface --------------------------------------------------------------------
    def propose(self, context: AgentContext, seeds: SweepSeeds | None = None) -> Proposal | None:
        """The next configuration to measure; `seeds` start a sweep from what is known already
        (autokernel.agents.tuner_seeds), None searches from the starter alone."""
        try:
            space, best_tunables = space_of(context.best_source)
        except KernelFileError as exc:
            self.last_message = f"the best kernel.py cannot be parsed: {exc}"
            return None
        if not space.names:
            self.last_message = "the kernel declares no TUNABLE_SPACE: nothing to tune"
            return None
        if self.restrict_to is not None:
            space = space.restricted(self.restrict_to)
        best_config = space.encode(best_tunables)
        assert best_config is not None  # space_of adds every current value to its dimension

        key = (context.target.rank, context.target.kernel_type)
        search = self._searches.get(key)
        space_key = (space.names, space.values)
        if search is None or search.space_key != space_key or search.seeds is not seeds:
            search = _TargetSearch(random.Random(f"{self.seed}:{key}"), space_key=space_key,
                                   seeds=seeds)
            self._searches[key] = search

        observations = self._observations(space, context.history)
        visited = {o.config for o in observations} | {best_config} \
            | self._in_flight(space, context.sibling_drafts)
        search.queue = [(c, why) for c, why in search.queue if c not in visited]
        # Queued points that the last measurements showed to launch a measured kernel again are
        # dropped (on the H100, 3 of a ViT layernorm's 12 initial points); the next batch still
        # falls back to them when nothing else is left.
        inert = _InertTunables(space, observations)
        search.queue = [item for item in search.queue if not inert.repeats_measured(item[0])]
        prior = ([] if seeds is None
                 else seeds.prior_points(space, best_tunables, self.good_quantile))
        state = _SweepState(space, observations, visited, search.rng, inert, prior)

        if seeds is not None:
            stalled = stall_reason([o.latency_us for o in observations], seeds.stall_after,
                                   seeds.min_gain)
            if stalled:
                self.last_message = stalled
                return None
            suggested = seeds.suggested_configs(space, best_tunables)
            pick = self._seeded_design_pick(state, best_config, suggested)
            if pick is not None:
                return self._proposal(context.best_source, space, best_tunables, pick.config,
                                      pick.why)
        if sum(1 for c in visited if space.contains(c)) >= space.size:
            self.last_message = f"all {space.size} configurations of the space were measured"
            return None
        if self._plateau(space, observations, best_config, visited):
            self.last_message = (
                f"plateau: {self.patience} measurements without a new best and every one-step "
                "neighbour of the best already measured"
            )
            return None

        if not search.queue:
            bonus = ({} if seeds is None
                     else suggestion_bonus(seeds.suggested_configs(space, best_tunables), prior))
            search.queue = self._next_batch(state, bonus)
        if not search.queue:
            self.last_message = "no unmeasured configuration left to propose"
            return None
        config, why = search.queue.pop(0)
        return self._proposal(context.best_source, space, best_tunables, config, why)

    def observe(self, proposal: Proposal, result: BenchResult, kept: bool) -> None:
        # Everything the search needs comes back through AgentContext.history on the next call
        # (which is also what a resumed run rebuilds), so there is nothing to store here.
        return None

    # -- the search -----------------------------------------------------------------------------
    @staticmethod
    def _in_flight(space: TunableSpace, drafts: list[str]) -> set[Config]:
        """The configurations of kernels proposed but not measured yet (judged in parallel):
        proposed once, never twice. Drafts that are descriptions, not sources, are skipped."""
        configs: set[Config] = set()
        for draft in drafts:
            try:
                _, tunables = space_of(draft)
            except KernelFileError:
                continue
            config = space.encode(tunables)
            if config is not None:
                configs.add(config)
        return configs

    def _observations(self, space: TunableSpace, history: list[Attempt]) -> list[_Observation]:
        found: dict[Config, _Observation] = {}
        for attempt in history:
            config = space.encode(attempt.tunables) if attempt.tunables else None
            if config is None:
                continue
            if attempt.status in FAILED_STATUSES:
                latency = None
            elif attempt.latency_us is not None and attempt.latency_us > 0:
                latency = float(attempt.latency_us)
            else:
                continue
            previous = found.get(config)
            # A configuration measured twice (e.g. the best re-checked) keeps its best passing time.
            if previous is None or (
                latency is not None
                and (previous.latency_us is None or latency < previous.latency_us)
            ):
                found[config] = _Observation(config, latency, attempt.experiment,
                                             attempt.launch_digest, attempt.hypothesis)
        return sorted(found.values(), key=lambda o: o.experiment)

    def _plateau(
        self,
        space: TunableSpace,
        observations: list[_Observation],
        best_config: Config,
        visited: set[Config],
    ) -> bool:
        passing = [o for o in observations if o.latency_us is not None]
        if not passing:
            return False
        best = min(passing, key=lambda o: o.latency_us)  # type: ignore[arg-type,return-value]
        since_best = sum(1 for o in observations if o.experiment > best.experiment)
        if since_best < self.patience:
            return False
        return all(n in visited for n in space.neighbours(best_config))

    def _next_batch(self, state: _SweepState, bonus: Mapping[Config, float] | None = None,
                    ) -> list[tuple[Config, str]]:
        # A warm start (prior results that can tell good from bad) replaces the initial design.
        model = self._fit(state)
        if (model is None or not state.prior) and (
                len(state.observations) < 1 + self.initial_neighbours + self.initial_random):
            return self._initial_design(state)
        candidates = self._candidates(state)
        if bonus:  # unmeasured suggestions stay candidates, with their bonus on P(good)
            candidates = sorted(set(candidates) | {c for c in bonus if c not in state.visited
                                                   and state.space.contains(c)})
        if not candidates:
            return []
        fresh = [c for c in candidates if not state.inert.repeats_measured(c)]
        candidates = fresh or candidates
        if model is None:
            # One class only (all failed, or too few to split): explore around the best and away.
            state.rng.shuffle(candidates)
            return [(c, "exploration (surrogate needs good and bad examples)")
                    for c in candidates[: self.batch_size]]
        scores = _p_good(model, candidates)
        if bonus:
            scores = [s + bonus.get(c, 0.0) for s, c in zip(scores, candidates)]
        return self._diverse_pick(state.space, candidates, scores, len(state.observations),
                                  state.rng)

    def _seeded_design_pick(self, state: _SweepState, best_config: Config,
                            suggested: list[Config]) -> DesignPick | None:
        """The seeded sweep's next initial-design point (autokernel.agents.tuner_design), or None
        once `seeded_design` points were measured: the model-guided phase takes over."""
        observations = state.observations
        turn = len(observations) - 1  # measurements after the sweep's starting point
        if not observations or turn >= self.seeded_design:
            return None
        model = self._fit(state)
        order, centre = None, observations[0].config
        if self.adaptive_turns:
            order = adaptive_order(_design_record(observations))
            # Local moves step from the best so far (where a win was); from the starter once the
            # best's neighbourhood holds nothing unmeasured in the space.
            if any(n not in state.visited for n in state.space.neighbours(best_config)):
                centre = best_config
        label = "the starter" if centre == observations[0].config else "the best so far"
        return next_design_pick(
            turn=turn, space=state.space, starter=centre, suggested=suggested,
            prior=state.prior, warm_candidates=lambda: self._candidates(state),
            score=(lambda configs: _p_good(model, configs)) if model is not None else None,
            visited=state.visited, skip=state.inert.repeats_measured, rng=state.rng, order=order,
            centre_label=label)

    def _initial_design(self, state: _SweepState) -> list[tuple[Config, str]]:
        space, observations, rng, inert = state.space, state.observations, state.rng, state.inert
        picked: list[tuple[Config, str]] = []
        taken = set(state.visited)
        if observations:
            starter = observations[0].config  # the target's experiment 0
            neighbours = [c for c in space.neighbours(starter) if c not in taken]
            rng.shuffle(neighbours)
            neighbours = inert.first_fresh(neighbours)
            for config in neighbours[: self.initial_neighbours]:
                taken.add(config)
                picked.append((config, "initial design: one step from the starter"))
        wanted = len(picked) + self.initial_random
        for _ in range(50 * self.initial_random):
            if len(picked) >= wanted:
                break
            config = space.random(rng)
            if config not in taken and not inert.repeats_measured(config):
                taken.add(config)
                picked.append((config, "initial design: random configuration"))
        return picked

    def _fit(self, state: _SweepState) -> Any:
        import numpy as np
        from sklearn.ensemble import ExtraTreesClassifier

        observations = state.observations
        passing = sorted(o.latency_us for o in observations if o.latency_us is not None)
        if not passing:
            return None
        threshold = float(np.quantile(passing, self.good_quantile))
        threshold = max(threshold, passing[0])  # the best is always good
        features, labels, weights = [], [], []
        for o in observations:
            features.append(o.config)
            good = o.latency_us is not None and o.latency_us <= threshold
            labels.append(1 if good else 0)
            # Clearly good points weigh more than ones just under the threshold (as in LFBO).
            weights.append(1.0 + (threshold - o.latency_us) / threshold if good else 1.0)
        # Another structure's results: labelled against each other, down-weighted.
        for point in state.prior:
            features.append(point.config)
            labels.append(1 if point.good else 0)
            weights.append(point.weight)
        if len(set(labels)) < 2:
            return None
        model = ExtraTreesClassifier(
            n_estimators=self.n_estimators,
            min_samples_leaf=1,
            max_features=None,
            random_state=len(observations),
            n_jobs=1,
        )
        model.fit(np.asarray(features, dtype=float), labels, sample_weight=weights)
        return model

    def _candidates(self, state: _SweepState) -> list[Config]:
        space, rng, prior = state.space, state.rng, state.prior
        passing = sorted(
            (o for o in state.observations if o.latency_us is not None),
            key=lambda o: o.latency_us,  # type: ignore[arg-type,return-value]
        )
        parents = [o.config for o in passing[: self.parents]]
        parents += best_prior_configs(prior, self.parents)
        found: set[Config] = {p.config for p in prior}
        for parent in parents:
            found.update(space.neighbours(parent))
            for _ in range(self.perturbations_per_parent):
                found.add(space.perturb(parent, rng, dims=rng.choice((2, 3))))
        for _ in range(min(self.random_candidates, space.size)):
            found.add(space.random(rng))
        return sorted(c for c in found - state.visited if space.contains(c))

    def _diverse_pick(
        self,
        space: TunableSpace,
        candidates: list[Config],
        scores: Any,
        n_observations: int,
        rng: random.Random,
    ) -> list[tuple[Config, str]]:
        dims = len(space.names)
        # A tiny random jitter breaks ties between equally scored candidates without bias.
        remaining = {c: float(s) + 1e-6 * rng.random() for c, s in zip(candidates, scores)}
        raw = dict(zip(candidates, (float(s) for s in scores)))
        picked: list[tuple[Config, str]] = []
        while remaining and len(picked) < self.batch_size:
            def penalized(c: Config) -> float:
                if not picked:
                    return remaining[c]
                similarity = max(
                    sum(a == b for a, b in zip(c, p)) / dims for p, _ in picked
                )
                return remaining[c] - self.diversity_penalty * similarity

            choice = max(remaining, key=penalized)
            del remaining[choice]
            picked.append(
                (choice, f"surrogate P(good)={raw[choice]:.2f} over {n_observations} measured")
            )
        return picked

    def _proposal(
        self,
        best_source: str,
        space: TunableSpace,
        best_tunables: dict[str, Any],
        config: Config,
        why: str,
    ) -> Proposal:
        tunables = space.decode(config)
        changed = {n: v for n, v in tunables.items() if best_tunables.get(n) != v}
        # Initial-design points are samples for the model, not ideas that can fail: the loop's
        # "consecutive reverts" plateau rule starts counting at the model-guided proposals.
        exploring = why.startswith("initial design")
        source = set_tunables(best_source, changed)
        edits = ", ".join(f"{n}={v!r}" if isinstance(v, str) else f"{n}={v}"
                          for n, v in changed.items())
        return Proposal(
            source=source,
            description=f"tuner: {edits}",
            hypothesis=why,
            tunables=tunables,
            agent=self.name,
            sweep=exploring,
        )


def _p_good(model: Any, configs: list[Config]) -> list[float]:
    """The surrogate's P(good) of each configuration."""
    import numpy as np

    good_column = list(model.classes_).index(1)
    return [float(p) for p in
            model.predict_proba(np.asarray(configs, dtype=float))[:, good_column]]


def _design_record(observations: list[_Observation]) -> list[tuple[str | None, bool]]:
    """Per seeded-design point measured after the starter: the source that picked it (from its
    hypothesis) and whether it improved the sweep's best at the time."""
    record: list[tuple[str | None, bool]] = []
    best = observations[0].latency_us if observations else None
    for o in observations[1:]:
        improved = o.latency_us is not None and (best is None or o.latency_us < best)
        record.append((source_of(o.why), improved))
        if improved:
            best = o.latency_us
    return record
