"""A harness that answers from a table of measured latencies instead of running kernels.

docs/benchmarks/config-sweep-h100/sweep.json holds, per kernel type and shape, the H100 latency of
60 configurations of the starter's TUNABLE_SPACE (`python -m autokernel.benchmarks config-sweep`: the starter, its
one-step neighbours, random ones). `LookupHarness.latency` serves those figures; a configuration the
table lacks is a failed run (no figure was measured for it, so none is made up). Every call counts.

`sweep_scenario` turns one table entry into one tuner sweep as the hybrid agent would run it:
- with a VARIANT tunable (two implementations in one file), the *new structure* is the VARIANT of
  the table's best configuration, swept over the other tunables, and the *previous structure* is the
  other VARIANT: its rows are the warm start, carried over by tunable name (VARIANT dropped);
- without one (rotary_embedding), the whole table is the new structure and there is no previous one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autokernel.agents.tuner_seeds import PriorResult

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_TABLE = REPO_ROOT / "docs" / "benchmarks" / "config-sweep-h100" / "sweep.json"
VARIANT = "VARIANT"


def config_key(tunables: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(tunables.items()))


@dataclass(frozen=True)
class TableEntry:
    """One kernel type and shape of the table."""

    kernel_type: str
    shape: tuple[int, ...]
    rows: tuple[tuple[dict[str, Any], float | None], ...]  # (configuration, µs or None: failed)
    starter: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.kernel_type} {'x'.join(str(d) for d in self.shape)}"


def load_table(path: str | Path = DEFAULT_TABLE) -> list[TableEntry]:
    entries = []
    for raw in json.loads(Path(path).read_text(encoding="utf-8")):
        rows = tuple((dict(r["config"]), r.get("us")) for r in raw["rows"])
        starters = [dict(r["config"]) for r in raw["rows"] if not r.get("changed")]
        entries.append(TableEntry(raw["kernel_type"], tuple(raw["shape"]), rows, starters[0]))
    return entries


class LookupHarness:
    """latency(config) from the table; None (a failed run) for a configuration it lacks."""

    def __init__(self, rows: list[tuple[dict[str, Any], float | None]]) -> None:
        self._latency = {config_key(config): us for config, us in rows}
        self.calls = 0

    def latency(self, tunables: Mapping[str, Any]) -> float | None:
        self.calls += 1
        return self._latency.get(config_key(tunables))


@dataclass(frozen=True)
class Scenario:
    """One sweep of a new structure: its space, its measured configurations, where it starts."""

    entry: TableEntry
    space: dict[str, list[Any]]  # the new structure's TUNABLE_SPACE
    rows: list[tuple[dict[str, Any], float | None]]  # its configurations in the table
    starter: dict[str, Any]
    prior: list[PriorResult]  # the previous structure's results (the warm start)
    structure: str  # which one, in words

    @property
    def best_us(self) -> float:
        return min(us for _, us in self.rows if us is not None)

    @property
    def starter_us(self) -> float | None:
        return LookupHarness(self.rows).latency(self.starter)


def _space(rows: list[tuple[dict[str, Any], float | None]]) -> dict[str, list[Any]]:
    space: dict[str, set[Any]] = {}
    for config, _ in rows:
        for name, value in config.items():
            space.setdefault(name, set()).add(value)
    return {name: sorted(values) for name, values in sorted(space.items())}


def sweep_scenario(entry: TableEntry) -> Scenario:
    rows = list(entry.rows)
    variants = {config.get(VARIANT) for config, _ in rows}
    if len(variants) < 2:
        return Scenario(entry, _space(rows), rows, dict(entry.starter), [],
                        "the whole table (no VARIANT tunable: no previous structure)")
    best_config = min((r for r in rows if r[1] is not None), key=lambda r: r[1])[0]
    new = best_config[VARIANT]

    def without_variant(config: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in config.items() if k != VARIANT}

    own = [(without_variant(c), us) for c, us in rows if c[VARIANT] == new]
    prior = [PriorResult(without_variant(c), us, structure=str(c[VARIANT]))
             for c, us in rows if c[VARIANT] != new]
    old = sorted({str(c[VARIANT]) for c, _ in rows if c[VARIANT] != new})
    return Scenario(entry, _space(own), own, without_variant(entry.starter), prior,
                    f"VARIANT={new!r} swept; warm start from VARIANT={', '.join(old)}")


def kernel_source(kernel_type: str, space: Mapping[str, list[Any]],
                  tunables: Mapping[str, Any]) -> str:
    """A kernel.py the tuner can parse and edit (`set_tunables`); it is never run."""
    lines = [f"KERNEL_TYPE = {kernel_type!r}", 'BACKEND = "triton"', ""]
    lines += [f"{name} = {tunables[name]!r}" for name in space]
    lines += [f"TUNABLE_SPACE = {dict(space)!r}", "", "", "def kernel_fn(*args):",
              "    raise NotImplementedError('a lookup-table kernel is never run')", ""]
    return "\n".join(lines)
