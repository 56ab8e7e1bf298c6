"""The judge's clock against what a candidate process reports.

`check_batch_clock`: the wall time W from sending a batch request to receiving its reply (sync to
sync, on the judge's side) must satisfy

    sum(reported device times) <= W + 50 µs
    W <= spin + sum(reported device times) + calls * (flush + output copy) + 1 ms + 10% of W

when the process says its host stayed ahead of the GPU. The spin is the judge's choice
(`next_spin`: 1.5x the host queueing time last reported, at most 200 µs plus HOST_ALLOWANCE_US
per call). Which timed outputs the judge compares is `judge_audit`'s.
"""

from __future__ import annotations

import time

from autokernel.harness.timing import MIN_SPIN_US, SPIN_MARGIN
from autokernel.text import count_of

HOST_ALLOWANCE_US = 500.0  # the most spin per call the judge grants a process's host
WALL_SLACK_US = 1000.0
WALL_SLACK_FRACTION = 0.10
OVERCLAIM_SLACK_US = 50.0


def check_batch_clock(wall_us: float, device_us: list[float], spin_us: float,
                      overhead_us: float, cpu_us: float | None = None) -> str | None:
    """Why the judge's clock contradicts a batch's reported device times, or None (the bounds
    are in the module docstring). `cpu_us`, on the CPU: the CPU time the candidate process
    used over the batch, read by the judge from that process's kernel clock (`ProcessClock`).
    A wall time longer than explained then stands only if that CPU time is longer than
    explained too: a busy machine keeps a process off the CPU (its wall grows, its CPU time
    does not), while hidden work is CPU time the process used."""
    claimed = sum(device_us)
    if claimed > wall_us + OVERCLAIM_SLACK_US:
        return (f"{claimed:.0f} µs of device time reported for a batch the judge saw take "
                f"{wall_us:.0f} µs")
    allowed = spin_us + claimed + overhead_us + WALL_SLACK_US + WALL_SLACK_FRACTION * wall_us
    if wall_us > allowed and cpu_us is not None and cpu_us <= (
            claimed + overhead_us + WALL_SLACK_US + WALL_SLACK_FRACTION * claimed):
        return None
    if wall_us > allowed:
        return (f"a batch of {count_of(len(device_us), 'call')} took {wall_us:.0f} µs sync to "
                f"sync by the "
                f"judge's clock, but {claimed:.0f} µs of device time was reported (with the "
                f"{spin_us:.0f} µs spin, {overhead_us:.0f} µs of flushes and copies and the "
                f"slack, at most {allowed:.0f} µs is explained)")
    return None


class ProcessClock:
    """The CPU time of another process, all its threads, from Linux's per-process CPU clock
    (`clock_getcpuclockid`'s clock id for a pid, read with clock_gettime: ns resolution, no
    help from the process). `read` gives µs, or None where the kernel refuses it."""

    def __init__(self, pid: int) -> None:
        self.clock = ((~pid) << 3) | 2  # CPUCLOCK_SCHED of the whole process (not a thread)

    def read(self) -> float | None:
        try:
            return time.clock_gettime_ns(self.clock) / 1e3
        except (OSError, OverflowError):
            return None


def next_spin(spin_us: float, host_us: float, ahead: bool, calls: int) -> float:
    """The spin the judge grants the next batch: enough to hide the host queueing time last
    reported, doubled after a batch whose host fell behind, capped per call."""
    cap = MIN_SPIN_US + calls * HOST_ALLOWANCE_US
    wanted = max(SPIN_MARGIN * host_us, 2 * spin_us if not ahead else MIN_SPIN_US)
    return min(cap, max(MIN_SPIN_US, wanted))

