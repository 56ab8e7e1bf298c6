"""A kernel file's TUNABLE_SPACE as the tuner searches it: configurations as index tuples.

Each tunable's legal values are an ordered list (the file's own order, numbers sorted), so "one
step" along a dimension means the next value up or down. A space may be restricted to an explicit
set of configurations (`TunerAgent(restrict_to=...)`: a benchmark's lookup table, where nothing else
was measured); every draw, neighbour and size then stays inside that set.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autokernel.kernelfile import parse_kernel_source

Config = tuple[int, ...]  # one index into each dimension's value list, in dimension order


@dataclass
class TunableSpace:
    names: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    allowed: tuple[Config, ...] | None = None  # None: the whole product of the value lists

    def __post_init__(self) -> None:
        self._allowed_set = frozenset(self.allowed) if self.allowed is not None else None

    @property
    def size(self) -> int:
        if self.allowed is not None:
            return len(self.allowed)
        total = 1
        for vals in self.values:
            total *= len(vals)
        return total

    def contains(self, config: Config) -> bool:
        return self._allowed_set is None or config in self._allowed_set

    def encode(self, tunables: Mapping[str, Any]) -> Config | None:
        """Index form of a full tunables dict, or None if it is not a point of this space."""
        if set(tunables) != set(self.names):
            return None
        return self.encode_carried(tunables, {})

    def encode_carried(self, tunables: Mapping[str, Any],
                       defaults: Mapping[str, Any]) -> Config | None:
        """A configuration from another file's tunables: names this space lacks are ignored, names
        `tunables` lacks take `defaults`; None when a value (or a default) is not in this space."""
        indices = []
        for name, vals in zip(self.names, self.values):
            if name in tunables:
                value = tunables[name]
            elif name in defaults:
                value = defaults[name]
            else:
                return None
            if value not in vals:
                return None
            indices.append(vals.index(value))
        return tuple(indices)  # maybe outside a restricted space: still a measured point

    def decode(self, config: Config) -> dict[str, Any]:
        return {n: vals[i] for n, vals, i in zip(self.names, self.values, config)}

    def random(self, rng: random.Random) -> Config:
        if self.allowed is not None:
            return rng.choice(self.allowed)
        return tuple(rng.randrange(len(vals)) for vals in self.values)

    def neighbours(self, config: Config) -> list[Config]:
        """Every configuration one step away along one dimension."""
        found = []
        for dim, size in enumerate(len(v) for v in self.values):
            for step in (-1, 1):
                index = config[dim] + step
                if 0 <= index < size:
                    moved = config[:dim] + (index,) + config[dim + 1:]
                    if self.contains(moved):
                        found.append(moved)
        return found

    def perturb(self, config: Config, rng: random.Random, dims: int) -> Config:
        """A random move along a few dimensions (possibly outside a restricted space)."""
        moved = list(config)
        for dim in rng.sample(range(len(self.names)), min(dims, len(self.names))):
            size = len(self.values[dim])
            if size > 1:
                step = rng.choice((-2, -1, 1, 2))
                moved[dim] = min(size - 1, max(0, moved[dim] + step))
        return tuple(moved)

    def restricted(self, configs: Iterable[Mapping[str, Any]]) -> TunableSpace:
        """This space limited to `configs` (those that are points of it; order kept)."""
        kept: dict[Config, None] = {}
        for tunables in configs:
            config = self.encode(tunables)
            if config is not None:
                kept[config] = None
        return TunableSpace(self.names, self.values, tuple(kept))


def space_of(source: str) -> tuple[TunableSpace, dict[str, Any]]:
    """The space a kernel file declares and its current tunables (a value set by hand outside the
    listed ones is still a point)."""
    info = parse_kernel_source(source)
    names = tuple(sorted(info.space))
    values = []
    for name in names:
        vals = list(info.space[name])
        current = info.tunables[name]
        if current not in vals:
            vals.append(current)
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                vals.sort()
        values.append(tuple(vals))
    return TunableSpace(names, tuple(values)), dict(info.tunables)
