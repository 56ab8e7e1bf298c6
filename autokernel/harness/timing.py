"""How the harness times kernels: device time with the host kept out of it, and host cost apart.

Two different figures (see ../shared/research/timing.md for the measurements behind this):

- **Device time**, what kernels are judged by: how long the GPU spends on the call when the host
  has queued it ahead of time, as in a CUDA graph, under torch.compile's reduce-overhead, or in any
  model whose host runs ahead. Timing one call bracketed by synchronize instead puts the host's
  launch path inside the interval whenever it is slower than whatever the GPU still has queued, and
  Python launchers are: a 9 µs kernel then reads 74 µs, bimodally.
- **Host launch cost** (`synced_calls`): the wall time of one call bracketed by synchronize, minus
  its device time. Reported on its own; never mixed into device time.

Device-time protocol (`time_rounds`), GPU. Rounds run in batches of a few calls per contestant:

1. Before the batch, `prepare` makes every call's inputs: fresh values each call (no cache keyed
   by pointer, shape or value can replay), generated before the batch because generating them may
   synchronize.
2. A spin kernel holds the GPU while the host queues the whole batch. An event recorded after the
   spin tells afterwards whether the host finished queueing before the spin ended; if it did not,
   the host may have fallen behind inside the batch, and the batch is run again with fresh inputs
   and a longer spin.
3. Per call, in a random order within each round (so drift, and whatever the previous call left
   behind, hits every contestant alike): flush L2 by writing 256 MiB (every contestant reads its
   inputs from HBM, as inside a model), an event, the call, an event. Nothing synchronizes inside
   a batch: start→end is the call's device time.
4. One synchronize per batch, then `after` for each call (untimed checks, audits).

A round gives each contestant one sample: the mean of its calls in that round. A pilot round
(checked, not counted) sizes the spin and the calls per round: one for kernels of 40 µs and more,
up to four for the shortest, whose single calls vary by ~5% with where their buffers land. Paired
comparisons use the same rounds: round r of the candidate against round r of the incumbent.

A contestant whose call waits for the device (a `.item()`, a copy to the host) would stall the
host inside a shared batch; a probe call behind a long spin finds it, and it is timed in batches
of its own, its figure then including that wait (said in the report's notes).

Guards the harness wraps around the candidate (launch monitor, op recorder) add host time only;
the host is ahead of the GPU for the whole batch (step 2), so they cannot reach the figure. The
baselines (eager, compile) run bare.

Work a candidate leaves on another stream escapes the events of step 3; `synced_calls`, separate
and untimed, measures how long the device stays busy after the call (`hidden_work_reason`).

On the CPU (the Triton interpreter) rounds are timed by a host clock, call by call; those figures
say nothing about a GPU and are labelled so. The clock functions are captured when this module is
imported, before any candidate exists.
"""

from __future__ import annotations

import math
import random
import secrets
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
# Calls queued per batch: well under CUDA's launch-queue depth (~1000 entries), which a call with
# its input refills, flush and events could otherwise fill, blocking the host mid-batch.
MAX_CALLS_PER_BATCH = 24
# Inputs of one batch are made up front; past this many bytes the batch gets fewer rounds.
BATCH_INPUT_BYTES = 2 * 2**30
SPIN_MARGIN = 1.5  # spin this many times the host's measured queueing time of a batch
MIN_SPIN_US = 200.0
MAX_SPIN_US = 200_000.0
BATCH_ATTEMPTS = 3
SYNCED_CALLS = 10
# A round averages enough calls of a short kernel to hold this much device time, at most
# MAX_CALLS_PER_ROUND: one call of a 9 µs kernel varies by ~8% with where its buffers land (the
# rope starter on the H100: do_bench's own IQR 7.7%; four calls a round still left 5.5%).
ROUND_DEVICE_US = 80.0
MAX_CALLS_PER_ROUND = 8
SYNC_PROBE_US = 20_000.0  # a spin no honest launch path takes this long to get past

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed_time = torch.cuda.Event.elapsed_time
_query = torch.cuda.Event.query
_synchronize = torch.cuda.synchronize
_spin = torch.cuda._sleep


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
    """One contestant's device times, in microseconds, one per round (round r at index r)."""

    latency_us: list[float] = field(default_factory=list)

    @property
    def median_us(self) -> float:
        return median(self.latency_us)

    @property
    def iqr_us(self) -> float:
        return iqr(self.latency_us)


@dataclass
class TimedRounds:
    samples: dict[str, Samples]
    calls_per_round: int = 1  # each round's sample is the mean of this many calls
    synchronizing: list[str] = field(default_factory=list)  # timed alone: they wait for the GPU
    retried_batches: int = 0  # batches re-run because the host fell behind the GPU
    host_bound_batches: int = 0  # batches whose host stayed behind after every retry


Contestant = tuple[str, Callable[..., Any]]
# prepare(round, name) -> (the call's arguments, a token handed back to `after`)
Prepare = Callable[[int, str], tuple[tuple[Any, ...], Any]]
After = Callable[[int, str, Any, Any], None]  # after(round, name, output, token)


def make_flush_buffer(device: torch.device) -> torch.Tensor | None:
    if device.type != "cuda":
        return None
    return torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)


class Spinner:
    """Holds the GPU for a given time with a spin kernel, so the host can queue work behind it."""

    def __init__(self) -> None:
        self.cycles_per_us: float | None = None

    def calibrate(self) -> None:
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        cycles = 2_000_000
        _spin(cycles // 10)  # first launch loads the kernel
        _record(start)
        _spin(cycles)
        _record(end)
        _synchronize()
        self.cycles_per_us = cycles / max(_elapsed_time(start, end) * 1e3, 1.0)

    def hold(self, microseconds: float) -> None:
        if self.cycles_per_us is None:
            self.calibrate()
        assert self.cycles_per_us is not None
        _spin(int(min(MAX_SPIN_US, max(MIN_SPIN_US, microseconds)) * self.cycles_per_us))


def rounds_per_batch(calls_per_round: int, input_bytes: int,
                     max_calls: int = MAX_CALLS_PER_BATCH) -> int:
    by_queue = max(1, max_calls // max(1, calls_per_round))
    by_memory = max(1, BATCH_INPUT_BYTES // max(1, calls_per_round * input_bytes))
    return min(by_queue, by_memory)


def calls_per_round_for(device_us: Sequence[float]) -> int:
    """Short kernels vary call to call by a larger fraction: average a few calls per round.

    Sized by the shortest contestant, not a typical one: the paired ratio is as noisy as its
    noisier side, and a 9 µs candidate beside a 120 µs eager baseline (rope) kept an IQR of 5.5%
    when the median of the three set one call per round."""
    measured = [us for us in device_us if us > 0]
    if not measured:
        return MAX_CALLS_PER_ROUND
    return max(1, min(MAX_CALLS_PER_ROUND, math.ceil(ROUND_DEVICE_US / min(measured))))


class DeviceTimer:
    """Times rounds of every contestant; see the module docstring.

    `prepare(round, name)` makes a call's arguments (fresh values) and a token; `after(round, name,
    output, token)` runs once the call's batch has finished, outside the timed region. The pilot
    (round -1: its checks run, its times are dropped) finds contestants that wait for the device,
    sizes the spin and the calls per round, and says what a round costs, so the caller can fit the
    rounds to its time budget before `run`.

    `max_calls_per_batch` bounds the calls queued behind one spin; a contestant that is a whole
    model's forward launches many kernels per call, and the launch queue holds ~1000 entries.
    """

    def __init__(self, contestants: Sequence[Contestant], prepare: Prepare, after: After,
                 device: torch.device, flush: torch.Tensor | None, input_bytes: int = 0,
                 spinner: Spinner | None = None,
                 max_calls_per_batch: int = MAX_CALLS_PER_BATCH) -> None:
        self.max_calls_per_batch = max_calls_per_batch
        self.contestants = list(contestants)
        self.prepare, self.after = prepare, after
        self.device, self.flush, self.input_bytes = device, flush, input_bytes
        self.spinner = spinner or Spinner()
        self.order = random.Random(secrets.randbits(64))
        self.timed = TimedRounds({name: Samples() for name, _ in contestants})
        self.alone: list[Contestant] = []
        self.shared = self.contestants
        self.spin_us = MIN_SPIN_US

    def pilot(self) -> float:
        """One untimed round; returns the estimated seconds one timed round will take."""
        began = _perf_counter()
        if self.device.type != "cuda":
            for name, fn in self.contestants:
                args, token = self.prepare(-1, name)
                self.after(-1, name, fn(*args), token)
            return _perf_counter() - began
        # A contestant that waits for the device inside its call (`.item()`, a host copy) would
        # stall the host in the middle of a shared batch and let host time into everyone's
        # intervals: it is timed on its own, and its figure includes that wait.
        self.alone = [c for c in self.contestants if self._waits_for_device(c)]
        self.shared = [c for c in self.contestants if c not in self.alone]
        self.timed.synchronizing = [name for name, _ in self.alone]
        began = _perf_counter()
        device_us: list[float] = []
        for batch in self._batches([-1], 1):
            batch.run(self.prepare, self.after, self.flush, self.spinner, MIN_SPIN_US, self.timed)
            device_us += batch.device_us()
            self.spin_us = max(self.spin_us, SPIN_MARGIN * batch.host_us)
        self.timed.calls_per_round = calls_per_round_for(device_us)
        return (_perf_counter() - began) * self.timed.calls_per_round

    def run(self, rounds: int) -> TimedRounds:
        """Time rounds 0..rounds-1 (appended to any rounds run before)."""
        if self.device.type != "cuda":
            return self._run_on_host(rounds)
        per_batch = rounds_per_batch(len(self.contestants) * self.timed.calls_per_round,
                                     self.input_bytes, self.max_calls_per_batch)
        for first in range(0, rounds, per_batch):
            rounds_here = list(range(first, min(rounds, first + per_batch)))
            batches = self._batches(rounds_here, self.timed.calls_per_round)
            for batch in batches:
                self.spin_us = batch.run(self.prepare, self.after, self.flush, self.spinner,
                                         self.spin_us, self.timed)
            for r in rounds_here:
                for name, _ in self.contestants:
                    times = [t for batch in batches for t in batch.device_us(r, name)]
                    self.timed.samples[name].latency_us.append(sum(times) / len(times))
        return self.timed

    def _batches(self, rounds: list[int], calls_per_round: int) -> list[_Batch]:
        batches = [_Batch(self.shared, rounds, calls_per_round, self.order)] if self.shared \
            else []
        return batches + [_Batch([c], [r], calls_per_round, self.order, needs_host_ahead=False)
                          for c in self.alone for r in rounds]

    def _waits_for_device(self, contestant: Contestant) -> bool:
        """Does one call block its host until the GPU catches up? Queued behind a long spin, a
        call that only launches returns long before the spin ends."""
        name, fn = contestant
        args, token = self.prepare(-1, name)
        _synchronize()
        self.spinner.hold(SYNC_PROBE_US)
        gate = _Event()
        _record(gate)
        if self.flush is not None:
            self.flush.zero_()
        out = fn(*args)
        waited = _query(gate)
        _synchronize()
        self.after(-1, name, out, token)
        return waited

    def _run_on_host(self, rounds: int) -> TimedRounds:
        for r in range(rounds):
            for name, fn in _rotated(self.contestants, r):
                args, token = self.prepare(r, name)
                begin = _perf_counter()
                out = fn(*args)
                self.timed.samples[name].latency_us.append((_perf_counter() - begin) * 1e6)
                self.after(r, name, out, token)
                del out
        return self.timed


def time_rounds(contestants: Sequence[Contestant], rounds: int, prepare: Prepare, after: After,
                device: torch.device, flush: torch.Tensor | None, input_bytes: int = 0,
                spinner: Spinner | None = None) -> TimedRounds:
    """A pilot, then `rounds` rounds (for callers with a fixed number of rounds)."""
    timer = DeviceTimer(contestants, prepare, after, device, flush, input_bytes, spinner)
    timer.pilot()
    return timer.run(rounds)


class _Batch:
    """Some rounds' calls, queued on the GPU behind a spin and timed by events."""

    def __init__(self, contestants: Sequence[Contestant], rounds: list[int], calls_per_round: int,
                 order: random.Random, needs_host_ahead: bool = True) -> None:
        self.rounds = rounds
        self.needs_host_ahead = needs_host_ahead
        # Each round's calls in a random order: no contestant always follows the same one.
        self.schedule = [(r, name, fn) for r in rounds for _ in range(calls_per_round)
                         for name, fn in order.sample(list(contestants), len(contestants))]
        self.events: list[tuple[int, str, Any, Any]] = []
        self.host_us = 0.0

    def run(self, prepare: Prepare, after: After, flush: torch.Tensor | None, spinner: Spinner,
            spin_us: float, timed: TimedRounds) -> float:
        """Run until the host stays ahead (or attempts run out); returns the next spin."""
        for attempt in range(BATCH_ATTEMPTS):
            calls = [(r, name, fn, *prepare(r, name)) for r, name, fn in self.schedule]
            _synchronize()
            spinner.hold(spin_us)
            gate = _Event()
            _record(gate)
            began = _perf_counter()
            self.events, outputs = [], []
            for r, name, fn, args, _ in calls:
                start, end = _Event(enable_timing=True), _Event(enable_timing=True)
                if flush is not None:
                    flush.zero_()
                _record(start)
                outputs.append(fn(*args))
                _record(end)
                self.events.append((r, name, start, end))
            self.host_us = (_perf_counter() - began) * 1e6
            ahead = not _query(gate) or not self.needs_host_ahead
            _synchronize()
            for (r, name, _, _, token), out in zip(calls, outputs):
                after(r, name, out, token)
            del calls, outputs
            if ahead:
                break
            if attempt < BATCH_ATTEMPTS - 1:
                timed.retried_batches += 1
            spin_us = max(2 * spin_us, SPIN_MARGIN * self.host_us)
        else:
            timed.host_bound_batches += 1
        return max(spin_us, SPIN_MARGIN * self.host_us)

    def device_us(self, r: int | None = None, name: str | None = None) -> list[float]:
        return [_elapsed_time(start, end) * 1e3 for rr, nn, start, end in self.events
                if (r is None or rr == r) and (name is None or nn == name)]


@dataclass
class BatchTimes:
    """One contestant's batch: each call's device time, the host's queueing time, and whether
    the host finished queueing before the spin ended (else host time may be in the figures)."""

    device_us: list[float]
    host_us: float
    ahead: bool


def run_batch(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]],
              flush: torch.Tensor | None, spinner: Spinner | None, spin_us: float,
              after_call: Callable[[int, Any], None] | None = None) -> BatchTimes:
    """One contestant's calls, queued behind a spin of `spin_us` (GPU) and timed by events, each
    after an L2 flush; `after_call(i, output)` runs after call i's end event is queued (outside
    its interval). On the CPU, a host clock around each call. One synchronize at the end."""
    if spinner is None:
        device_us = []
        for i, args in enumerate(calls):
            began = _perf_counter()
            out = fn(*args)
            device_us.append((_perf_counter() - began) * 1e6)
            if after_call is not None:
                after_call(i, out)
            del out
        return BatchTimes(device_us, sum(device_us), True)
    _synchronize()
    spinner.hold(spin_us)
    gate = _Event()
    _record(gate)
    began = _perf_counter()
    events = []
    for i, args in enumerate(calls):
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        if flush is not None:
            flush.zero_()
        _record(start)
        out = fn(*args)
        _record(end)
        if after_call is not None:
            after_call(i, out)
        events.append((start, end))
        del out
    host_us = (_perf_counter() - began) * 1e6
    ahead = not _query(gate)
    _synchronize()
    return BatchTimes([_elapsed_time(s, e) * 1e3 for s, e in events], host_us, ahead)


def _rotated(contestants: Sequence[Contestant], r: int) -> list[Contestant]:
    count = len(contestants)
    return [contestants[(r + i) % count] for i in range(count)]


@dataclass
class SyncedCalls:
    """Calls bracketed by synchronize: wall time (host launch included) and the device's tail."""

    wall_us: list[float] = field(default_factory=list)
    tail_us: list[float] = field(default_factory=list)  # device busy past the call's end event

    def launch_us(self, device_us: float) -> float | None:
        """Host launch cost: one synchronous call's wall time minus its device time."""
        return max(0.0, median(self.wall_us) - device_us) if self.wall_us else None


def synced_calls(fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]],
                 device: torch.device, flush: torch.Tensor | None,
                 calls: int = SYNCED_CALLS) -> SyncedCalls:
    """Calls each alone on an idle GPU with a flushed L2, outside the timed rounds.

    Wall-clock calls: from just before the call to the end of the synchronize after it, nothing
    else in between (no events). Tail calls: events before and after the call, a device-wide
    synchronize (it waits for every stream), then a third event; how far that one lands past the
    call's end event is work that went on after the call, where kernels hidden on another stream
    show up.
    """
    result = SyncedCalls()
    if device.type != "cuda":
        return result
    for _ in range(calls):
        args = make_args()
        if flush is not None:
            flush.zero_()
        _synchronize()
        began = _perf_counter()
        out = fn(*args)
        _synchronize()
        result.wall_us.append((_perf_counter() - began) * 1e6)
        del out, args
    for _ in range(calls):
        args = make_args()
        start, end, after_sync = (_Event(enable_timing=True) for _ in range(3))
        _synchronize()
        _record(start)
        out = fn(*args)
        _record(end)
        _synchronize()
        _record(after_sync)
        _synchronize()
        result.tail_us.append((_elapsed_time(start, after_sync) - _elapsed_time(start, end)) * 1e3)
        del out, args
    return result


def time_synchronous_calls(contestants: Sequence[Contestant], rounds: int,
                           device: torch.device,
                           flush: torch.Tensor | None) -> dict[str, Samples]:
    """Wall time per call, each call alone and synchronized (host launch cost included), rotating
    the order every round: what one synchronized eager forward costs (autokernel verify's wall
    figure, reported beside its device time, never in place of it)."""
    samples = {name: Samples() for name, _ in contestants}
    for r in range(rounds):
        for name, fn in _rotated(contestants, r):
            if flush is not None:
                flush.zero_()
            if device.type == "cuda":
                _synchronize()
            began = _perf_counter()
            out = fn()
            if device.type == "cuda":
                _synchronize()
            samples[name].latency_us.append((_perf_counter() - began) * 1e6)
            del out
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


def hidden_work_reason(candidate: SyncedCalls, reference: SyncedCalls,
                       candidate_device_us: float) -> str | None:
    """REJECTED reason when the device stays busy after the candidate's call returns.

    Honest contestants show the same short tail (the synchronize's own latency); a candidate that
    leaves work on a side stream shows that work in its tail. The margin is generous (25 µs or
    half the candidate's device time, whichever is larger) so scheduling noise never trips it.
    """
    if not candidate.tail_us or not reference.tail_us:
        return None
    # The lower quartile: hidden work lengthens every call's tail, a stray delay only some.
    tail, baseline = quantile(candidate.tail_us, 0.25), quantile(reference.tail_us, 0.25)
    if tail - baseline > max(25.0, 0.5 * candidate_device_us):
        return (f"work continues {tail - baseline:.1f} µs past the call: the device stayed busy "
                f"{tail:.1f} µs after it (lower quartile over {len(candidate.tail_us)} untimed "
                f"synchronized calls) against eager PyTorch's {baseline:.1f} µs; kernels on "
                "another stream or thread escape the timer")
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
                f"({latency_us:.2f} µs is faster than the hardware allows)")
    if best_baseline_us is not None and latency_us > 0:
        speedup = best_baseline_us / latency_us
        if speedup > max_speedup:
            return (f"impossible result: {speedup:.1f}x faster than the best PyTorch baseline "
                    f"({best_baseline_us:.2f} µs), over the {max_speedup:.0f}x credibility limit")
    return None
