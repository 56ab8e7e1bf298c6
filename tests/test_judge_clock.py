"""The judge's clock bound on a batch's reported times, and the CPU-time reading that tells a
busy machine from hidden work on the CPU."""

from __future__ import annotations

import subprocess
import sys
import time

from autokernel.harness.judge_clock import ProcessClock, check_batch_clock

CALLS = [2000.0] * 5  # 10 ms reported in all


def test_a_batch_that_took_what_it_reported_passes() -> None:
    assert check_batch_clock(10_500.0, CALLS, 0.0, 100.0) is None


def test_reporting_more_than_the_wall_is_a_contradiction_whatever_the_cpu_time() -> None:
    assert "reported for a batch" in check_batch_clock(5_000.0, CALLS, 0.0, 100.0, cpu_us=0.0)


def test_a_long_wall_with_as_much_cpu_time_is_hidden_work() -> None:
    # 200 ms of wall, 190 ms of CPU time for 10 ms reported: the process worked unreported.
    assert check_batch_clock(200_000.0, CALLS, 0.0, 100.0, cpu_us=190_000.0) is not None
    assert check_batch_clock(200_000.0, CALLS, 0.0, 100.0) is not None  # no reading: as before


def test_a_long_wall_without_the_cpu_time_is_a_busy_machine() -> None:
    # Off the CPU for 190 ms (preempted), on it for what it reported: no contradiction.
    assert check_batch_clock(200_000.0, CALLS, 0.0, 100.0, cpu_us=10_400.0) is None


def test_the_clock_reads_another_process_cpu_time_and_not_its_sleep() -> None:
    child = subprocess.Popen([sys.executable, "-c", (
        "import time\nend = time.perf_counter() + 0.3\nwhile time.perf_counter() < end: pass\n"
        "print('spun', flush=True)\ntime.sleep(30)")], stdout=subprocess.PIPE, text=True)
    try:
        clock = ProcessClock(child.pid)
        assert child.stdout.readline().strip() == "spun"  # from here on it sleeps
        first = clock.read()
        assert first is not None and first >= 250_000  # µs: at least the spin
        time.sleep(0.3)
        assert clock.read() - first < 30_000  # asleep: its CPU time barely moves
    finally:
        child.kill()
        child.wait()
