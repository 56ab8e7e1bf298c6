"""The keep rule's figure, the one figure every decision is shown with.

The keep rule (`autokernel.loop.keep`) decides on the paired speedup over the best kernel:
candidate and best timed in the same rounds, the timed shapes weighted by their share of the
target's profiled time, with a 95% interval (results.tsv's `vs_best`, `vs_best_lo`,
`vs_best_hi`). Every place that shows a decision shows that figure, in the words of
`decision_text`: the log line and the live dashboard, the commit message, report.md and
progress.png. Latencies at one shape, measured in different runs, can contradict it on noisy
timings (a kept kernel read slower at the primary shape than its baseline), so they are shown
only for the baseline, labelled with their shape, and otherwise left to results.tsv.

Over a target's keeps the figure chains (`KeepChain`): its best kernel is 1× at the baseline,
and each keep multiplies that by its paired speedup, so "× the baseline" rises at every keep and
nowhere else. A keep without paired rounds (the best no longer ran alongside) chains the ratio
of the call-weighted latencies (`objective_us`) the rule compared instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autokernel.text import format_latency, format_ratio, format_speedup

COMMITTED = ("baseline", "keep")


def paired_text(estimate: float, low: float | None, high: float | None) -> str:
    """'1.134× the best (95% CI 1.052–1.308×)'."""
    interval = ""
    if low is not None and high is not None:
        interval = f" (95% CI {format_ratio(low)[:-1]}–{format_ratio(high)})"
    return f"{format_ratio(estimate)} the best{interval}"


def paired_cell(row: Any) -> str:
    """The keep rule's figure for a table cell: '1.134× (1.052–1.308)', the 95% interval in
    brackets; "–" for a row without a paired figure."""
    estimate = number(row, "vs_best")
    if estimate is None:
        return "–"
    low, high = number(row, "vs_best_lo"), number(row, "vs_best_hi")
    if low is None or high is None:
        return format_ratio(estimate)
    return f"{format_ratio(estimate)} ({format_ratio(low)[:-1]}–{format_ratio(high)[:-1]})"


def _value(row: Any, name: str) -> Any:
    return row.get(name) if isinstance(row, Mapping) else getattr(row, name, None)


def number(row: Any, name: str) -> float | None:
    """A figure of a results.tsv row (a ResultRow, or the file's strings), None when blank."""
    value = _value(row, name)
    if value is None or value == "":
        return None
    try:
        figure = float(value)
    except (TypeError, ValueError):
        return None
    return None if figure != figure or figure in (float("inf"), float("-inf")) else figure


def decision_text(row: Any) -> str:
    """What the keep rule saw, for one experiment's row: the paired speedup over the best with
    its interval; for the baseline its latency and speedups at the primary shape, labelled;
    otherwise the verdict's reason (an unpaired comparison, a failure), which says it."""
    status = str(_value(row, "status") or "")
    estimate = number(row, "vs_best")
    if status == "baseline":
        latency = number(row, "latency_us")
        if latency is None:
            return str(_value(row, "reason") or _value(row, "correctness") or "")
        shape = _value(row, "shape") or "the primary shape"
        figures = [f"{format_latency(latency)} at {shape} (primary shape)"]
        for column, label in (("speedup_vs_pytorch", "eager"), ("speedup_vs_compile", "compile")):
            if (value := number(row, column)) is not None:
                figures.append(f"{format_speedup(value)} {label}")
        return ", ".join(figures)
    if estimate is not None:
        return paired_text(estimate, number(row, "vs_best_lo"), number(row, "vs_best_hi"))
    return str(_value(row, "reason") or _value(row, "correctness") or "")


@dataclass
class KeepChain:
    """Each target's best kernel × its baseline, in the keep rule's figure, from its rows of
    results.tsv in experiment order (`add` each row; `level` reads a target's figure)."""

    levels: dict[str, float] = field(default_factory=dict)
    _objectives: dict[str, float | None] = field(default_factory=dict)

    @classmethod
    def of_rows(cls, rows: Iterable[Any]) -> KeepChain:
        chain = cls()
        for row in sorted(rows, key=lambda r: int(_value(r, "experiment") or 0)):
            chain.add(row)
        return chain

    def level(self, tag: str) -> float | None:
        return self.levels.get(tag)

    def add(self, row: Any) -> float | None:
        """Take one row into the chain; return the row's own figure × the baseline (a kept
        row's is the new level; a non-kept one's is the level × its paired speedup; None for a
        failure or a row before anything passed)."""
        tag = str(_value(row, "tag"))
        status = str(_value(row, "status") or "")
        passed = str(_value(row, "correctness") or "") == "PASS"
        if not passed:
            return None
        objective = number(row, "objective_us") or number(row, "latency_us")
        vs_best = number(row, "vs_best")
        level = self.levels.get(tag)
        best_objective = self._objectives.get(tag)
        if status in COMMITTED:
            if level is None:  # the baseline, or the first passing kernel after a failed one
                level = 1.0
            elif vs_best is not None:
                level *= vs_best
            else:
                ratio = best_objective / objective if best_objective and objective else 1.0
                # An unpaired keep beat the best's recorded time by more than the margin; the
                # guard only matters for rows whose figures were lost or edited by hand.
                level *= max(ratio, 1.0)
            self.levels[tag] = level
            self._objectives[tag] = objective
            return level
        if level is None:
            return None
        if vs_best is not None:
            return level * vs_best
        if best_objective and objective:
            return level * best_objective / objective
        return None
