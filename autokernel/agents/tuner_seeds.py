"""What a tuner sweep may start from besides the starter: the LLM's suggested configurations, the
measured results of the structures swept before on the same target, and when to call it stalled.

`TunerAgent.propose(context, seeds=SweepSeeds(...))` uses them (the hybrid `--agent claude` passes
them for every sweep; the tuner alone, `--agent tuner`, passes none and searches as before):

- **Suggested configurations** (`Proposal.suggested_configs`: each a subset of the tunables) are
  completed with the draft's own values for the tunables they leave out; the seeded initial design
  (autokernel.agents.tuner_design) measures them in the LLM's order, taking turns with the
  surrogate's picks and the starter's neighbours.
- **Warm start.** A previous structure's results carry over where its tunables do: the same names,
  a value this space lists (a configuration with a value it does not list is dropped; a tunable the
  old file lacked takes the draft's value). They train the surrogate as down-weighted *prior*
  observations, labelled good or bad against their own structure's results (another structure's
  absolute latencies say little about this one's), and their best configurations are parents of the
  first candidates: the seeded design has no random configurations. Prior
  observations are never "measured" for the new structure: they are not visited, not counted by
  the plateau or stall rules, and a prior configuration can still be proposed and measured.
- **Stall stop.** The sweep ends once `stall_after` of its measurements in a row failed to improve
  its best latency by at least `min_gain` (relative), reported as the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autokernel.agents.tuner_space import Config, TunableSpace

SUGGESTED_WHY = "suggested by the LLM"


@dataclass(frozen=True)
class PriorResult:
    """One measured configuration of a structure swept before on this target."""

    tunables: Mapping[str, Any]
    latency_us: float | None  # None: it failed (crash, wrong result, timeout, rejected)
    structure: str = ""  # results of one structure are labelled against each other


@dataclass(frozen=True)
class PriorPoint:
    config: Config
    good: bool
    weight: float
    latency_us: float | None
    rank: float  # 0 = the best of its structure, 1 = the worst (failures: 1)


@dataclass
class SweepSeeds:
    suggested: list[dict[str, Any]] = field(default_factory=list)
    prior: list[PriorResult] = field(default_factory=list)
    prior_weight: float = 0.5  # a prior observation counts this much of a measured one
    stall_after: int | None = None  # None: no stall stop (the plateau rule alone)
    min_gain: float = 0.01

    def suggested_configs(self, space: TunableSpace, draft: Mapping[str, Any]) -> list[Config]:
        """The suggestions as full configurations of `space`, in order, without repeats."""
        found: list[Config] = []
        for partial in self.suggested:
            config = space.encode_carried({**draft, **partial}, {})
            if config is not None and config not in found:
                found.append(config)
        return found

    def prior_points(self, space: TunableSpace, draft: Mapping[str, Any],
                     good_quantile: float) -> list[PriorPoint]:
        """The previous structures' results carried onto `space` (see the module docstring)."""
        by_structure: dict[str, dict[Config, float | None]] = {}
        for result in self.prior:
            config = space.encode_carried(result.tunables, draft)
            if config is None:
                continue
            seen = by_structure.setdefault(result.structure, {})
            old = seen.get(config, None)
            if config not in seen or (result.latency_us is not None
                                      and (old is None or result.latency_us < old)):
                seen[config] = result.latency_us
        points: list[PriorPoint] = []
        for results in by_structure.values():
            passing = sorted(v for v in results.values() if v is not None)
            if not passing:
                continue
            threshold = max(passing[min(len(passing) - 1, int(good_quantile * len(passing)))],
                            passing[0])
            for config, latency in results.items():
                if latency is None:
                    points.append(PriorPoint(config, False, self.prior_weight, None, 1.0))
                    continue
                rank = passing.index(latency) / max(1, len(passing) - 1)
                good = latency <= threshold
                boost = 1.0 + (threshold - latency) / threshold if good else 1.0
                points.append(PriorPoint(config, good, self.prior_weight * boost, latency, rank))
        return points


def best_prior_configs(points: list[PriorPoint], count: int) -> list[Config]:
    """The `count` best-ranked passing prior configurations, best first."""
    passing = sorted((p for p in points if p.latency_us is not None), key=lambda p: p.rank)
    found: list[Config] = []
    for point in passing:
        if point.config not in found:
            found.append(point.config)
        if len(found) >= count:
            break
    return found


def stall_reason(latencies: list[float | None], stall_after: int | None, min_gain: float) -> str:
    """Why the sweep is stalled ('' while it is not): `latencies` are its own measurements in order
    (None: failed); the first is its starting point."""
    if stall_after is None or stall_after < 1:
        return ""
    best: float | None = None
    since = 0
    for latency in latencies:
        if latency is not None and (best is None or latency < best * (1.0 - min_gain)):
            best = latency
            since = 0
        else:
            if latency is not None and best is not None:
                best = min(best, latency)
            since += 1
    if best is None or since < stall_after:
        return ""
    return (f"stalled: {since} measurements in a row without improving the sweep's best "
            f"({best:.2f} µs) by {min_gain:.0%} or more")
