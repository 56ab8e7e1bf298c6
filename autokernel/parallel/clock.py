"""The run's time accounts when targets run in parallel: every open target's clock runs.

As in the one-GPU loop (`autokernel.loop.timekeeping`), the run's active time and each target's
own clock live in state.json and survive resume; here every open target (status "active") is on
a worker at once, so each gets the time that passes. A visit's share of the run's remaining time
is that time times the workers, over the targets still to visit and the ones open.
"""

from __future__ import annotations

from collections.abc import Callable

from autokernel.loop.state import RunState


class ParallelAccounts:
    def __init__(self, state: RunState, clock: Callable[[], float]) -> None:
        self.state = state
        self.clock = clock
        self.last_tick = clock()

    def tick(self) -> None:
        """Add the time since the last tick to the run's clock and every open target's."""
        now = self.clock()
        delta = max(0.0, now - self.last_tick)
        self.last_tick = now
        self.state.run_seconds += delta
        for target in self.state.targets:
            if target.status == "active":
                target.seconds += delta
                target.visit_seconds += delta

    def out_of_time(self) -> bool:
        left = self.state.remaining_seconds
        return left is not None and left <= 0

    def visit_budget(self, targets: int, workers: int) -> float | None:
        """A visit's share of the run's remaining time: `targets` (pending, this one included,
        and open) share `workers` streams of it; None without a run budget."""
        left = self.state.remaining_seconds
        if left is None:
            return None
        return left * min(1.0, workers / max(1, targets))

    def extend_hours(self, hours: float) -> None:
        """A new budget for the whole run: each open target's visit gets its share of the new
        remaining time."""
        self.state.hours = hours
        open_targets = [t for t in self.state.targets if t.status == "active"]
        pending = sum(t.status == "pending" for t in self.state.targets)
        left = max(0.0, self.state.remaining_seconds or 0.0)
        for target in open_targets:
            share = left / max(1, pending + len(open_targets))
            target.visit_budget_seconds = target.visit_seconds + share
