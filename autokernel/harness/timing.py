"""How the harness times: our own interleaved protocol, and the statistics it reports.

GPU protocol, per round and per contestant (candidate, eager stock, compiled stock), with the
contestants' order rotated every round so clock and thermal drift hit all of them alike:

1. `prepare`: refill the round's input buffers (the same buffers every few rounds) with fresh
   values, outside the timed region, so no result cached by pointer, shape or value can be
   replayed; buffers rotate so the previous round's inputs are not reused.
2. flush L2 by writing a 256 MiB buffer (well over any GPU's L2), so every contestant reads its
   inputs from HBM, as it would inside a model.
3. CUDA events around the call on the harness's stream; then a device-wide synchronize, and a
   third event recorded after it. start→end is the latency; start→after-sync also covers work
   left running on any other stream, which a cheat could use to hide time
   (`hidden_work_reason`).

Samples: at least MIN_ROUNDS rounds, more while the time box allows; the median and the
interquartile range are reported (never the mean: one preempted sample must not move the number).

On the CPU (the Triton interpreter) the same loop runs with a host clock and no flush; those
timings are not meaningful and are labelled so.

The clock functions are captured when this module is imported, before any candidate exists.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

MIN_ROUNDS = 20
MAX_ROUNDS = 200
CPU_ROUNDS = 5
FLUSH_BYTES = 256 * 2**20
MAX_SPEEDUP_OVER_BEST_BASELINE = 10.0
MAX_PCT_OF_DATASHEET_PEAK = 100.0

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed_time = torch.cuda.Event.elapsed_time
_synchronize = torch.cuda.synchronize


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of no samples")
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default rule)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no samples")
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def iqr(values: Sequence[float]) -> float:
    return quantile(values, 0.75) - quantile(values, 0.25)


@dataclass
class Samples:
    """One contestant's timings, in microseconds."""

    latency_us: list[float] = field(default_factory=list)
    after_sync_us: list[float] = field(default_factory=list)  # GPU only: start → after sync

    @property
    def median_us(self) -> float:
        return median(self.latency_us)

    @property
    def iqr_us(self) -> float:
        return iqr(self.latency_us)

    def tail_us(self) -> float | None:
        """Median of (after-sync - end): how long the device stayed busy past the timed call."""
        if not self.after_sync_us:
            return None
        return median([a - b for a, b in zip(self.after_sync_us, self.latency_us)])


Contestant = tuple[str, Callable[..., Any]]


def make_flush_buffer(device: torch.device) -> torch.Tensor | None:
    if device.type != "cuda":
        return None
    return torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)


def time_interleaved(
    contestants: Sequence[Contestant],
    rounds: int,
    prepare: Callable[[int, str], tuple[Any, ...]],
    after: Callable[[int, str, Any], None],
    device: torch.device,
    flush: torch.Tensor | None,
) -> dict[str, Samples]:
    """Run `rounds` rounds of every contestant, rotating the order; see the module docstring.

    `prepare(round, name)` returns the call's arguments (after refilling them); `after(round,
    name, output)` runs once the call has finished, outside the timed region.
    """
    samples = {name: Samples() for name, _ in contestants}
    pending: list[tuple[str, Any, Any, Any]] = []
    count = len(contestants)
    for r in range(rounds):
        order = [contestants[(r + i) % count] for i in range(count)]
        for name, fn in order:
            args = prepare(r, name)
            if device.type == "cuda":
                start, end, after_sync = (_Event(enable_timing=True) for _ in range(3))
                if flush is not None:
                    flush.zero_()
                _record(start)
                out = fn(*args)
                _record(end)
                _synchronize()
                _record(after_sync)
                pending.append((name, start, end, after_sync))
            else:
                begin = _perf_counter()
                out = fn(*args)
                samples[name].latency_us.append((_perf_counter() - begin) * 1e6)
            after(r, name, out)
            del out
    if device.type == "cuda":
        _synchronize()
        for name, start, end, after_sync in pending:
            samples[name].latency_us.append(_elapsed_time(start, end) * 1e3)
            samples[name].after_sync_us.append(_elapsed_time(start, after_sync) * 1e3)
    return samples


def rounds_for(budget_s: float, round_s: float, device: torch.device, quick: bool) -> int:
    """How many rounds fit the time box (at least MIN_ROUNDS on a GPU)."""
    if device.type != "cuda":
        return 3 if quick else CPU_ROUNDS
    if round_s <= 0:
        return MAX_ROUNDS
    return max(MIN_ROUNDS, min(MAX_ROUNDS, int(budget_s / round_s)))


def host_seconds(fn: Callable[[], Any], device: torch.device) -> float:
    """Wall time of one synchronous call (for sizing the time box, never reported)."""
    begin = _perf_counter()
    fn()
    if device.type == "cuda":
        _synchronize()
    return _perf_counter() - begin


def hidden_work_reason(candidate: Samples, reference: Samples) -> str | None:
    """REJECTED reason when the device stays busy after the candidate's timed call returns.

    Honest contestants show the same short tail (the synchronize's own latency); a candidate that
    leaves work on a side stream shows that work in its tail. The margin is generous (25 us or
    half the candidate's latency, whichever is larger) so scheduling noise never trips it.
    """
    tail, baseline = candidate.tail_us(), reference.tail_us()
    if tail is None or baseline is None:
        return None
    excess = tail - baseline
    if excess > max(25.0, 0.5 * candidate.median_us):
        return (f"work continues {excess:.1f} us past the timed call (median tail, vs the eager "
                "baseline's): kernels on another stream or thread escape the timer")
    return None


def impossible_reason(
    latency_us: float,
    pct_peak_datasheet: float | None,
    best_baseline_us: float | None,
    max_speedup: float = MAX_SPEEDUP_OVER_BEST_BASELINE,
) -> str | None:
    """Why a GPU timing cannot be real, or None when it is plausible.

    Faster than the roofline floor (over 100% of the datasheet peak) is physically impossible;
    more than `max_speedup` times faster than the best of eager and compiled PyTorch is not
    credible for the ops we optimize. Either way the result is quarantined as REJECTED, to be
    looked at by a person, never kept automatically.
    """
    if pct_peak_datasheet is not None and pct_peak_datasheet > MAX_PCT_OF_DATASHEET_PEAK:
        return (f"impossible result: {pct_peak_datasheet:.0f}% of the datasheet roofline "
                f"({latency_us:.2f} us is faster than the hardware allows)")
    if best_baseline_us is not None and latency_us > 0:
        speedup = best_baseline_us / latency_us
        if speedup > max_speedup:
            return (f"impossible result: {speedup:.1f}x faster than the best PyTorch baseline "
                    f"({best_baseline_us:.2f} us), over the {max_speedup:.0f}x credibility limit")
    return None
