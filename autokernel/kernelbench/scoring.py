"""KernelBench's fast_p over a set of problems.

KernelBench (Ouyang et al., 2025) scores a set of N problems by

    fast_p = (1/N) · #{problems that are correct AND whose speedup over the baseline is > p}

so fast_0 is the fraction of problems solved correctly (any measured speedup is > 0), fast_1 the
fraction that is correct and faster than the baseline, fast_2 at least twice as fast (strictly
more). Every problem counts in N: one that failed, timed out, or had nothing to optimize is
simply not correct.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

# (correct, speedup over the baseline; None when it was not measured)
Outcome = tuple[bool, float | None]

THRESHOLDS: tuple[float, ...] = (0.0, 1.0, 2.0)


def is_fast(outcome: Outcome, p: float) -> bool:
    """Correct, and faster than p× the baseline (strictly).

    For p = 0 correctness alone decides: a correct problem whose speedup was not measured (no
    torch.compile timing, say) still counts, since any timing it could have had is > 0.
    """
    correct, speedup = outcome
    if not correct:
        return False
    if p == 0:
        return True
    return speedup is not None and not math.isnan(speedup) and speedup > p


def fast_p(outcomes: Sequence[Outcome], p: float) -> float | None:
    """The fraction of `outcomes` that are correct with speedup > p; None for an empty set."""
    if p < 0 or math.isnan(p):
        raise ValueError(f"fast_p needs p >= 0; got {p}")
    if not outcomes:
        return None
    return sum(is_fast(o, p) for o in outcomes) / len(outcomes)


def fast_p_table(problems: Iterable[dict[str, Any]],
                 thresholds: Sequence[float] = THRESHOLDS) -> dict[str, dict[str, Any]]:
    """fast_p vs eager and vs torch.compile over per-problem records.

    Each record needs `correct` (bool) and `speedup_vs_eager` / `speedup_vs_compile` (float or
    None). For each baseline: {"fast_0": ..., "fast_1": ..., "fast_2": ..., "measured": how many
    problems have a speedup figure for it}. When no problem has a figure for a baseline (no
    torch.compile timing on the CPU), fast_p for p > 0 is None: not measured, rather than 0.
    """
    records = list(problems)
    table: dict[str, dict[str, Any]] = {}
    for baseline in ("eager", "compile"):
        key = f"speedup_vs_{baseline}"
        outcomes = [(bool(r.get("correct")), r.get(key)) for r in records]
        measured = sum(speedup is not None for _, speedup in outcomes)
        row: dict[str, Any] = {f"fast_{p:g}": fast_p(outcomes, p) if measured or p == 0 else None
                               for p in thresholds}
        row["measured"] = measured
        row["problems"] = len(outcomes)
        table[baseline] = row
    return table
