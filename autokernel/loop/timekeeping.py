"""The run's time accounts: active time, on the run's clock and on each target's own clock.

Both clocks live in state.json, so they survive resume; time between sessions never counts. A
target's visit gets an equal share of the run's remaining time with the targets still pending.
"""

from __future__ import annotations

from collections.abc import Callable

from autokernel.loop.state import RunState


class TimeAccounts:
    def __init__(self, state: RunState, clock: Callable[[], float]) -> None:
        self.state = state
        self.clock = clock
        self._last_tick = clock()

    def tick(self) -> None:
        """Add the time since the last tick to the run's and the current target's clocks."""
        now = self.clock()
        delta = max(0.0, now - self._last_tick)
        self._last_tick = now
        self.state.run_seconds += delta
        if self.state.current is not None:
            target = self.state.targets[self.state.current]
            target.seconds += delta
            target.visit_seconds += delta

    def out_of_time(self) -> bool:
        left = self.state.remaining_seconds
        return left is not None and left <= 0

    def visit_budget(self, pending: int) -> float | None:
        """A visit's share of the run's remaining time, `pending` targets (its own included)
        still to visit; None without a run budget."""
        left = self.state.remaining_seconds
        return left / pending if left is not None else None

    def extend_hours(self, hours: float) -> None:
        """A new time budget for the whole run: the target in progress gets its share of the
        new remaining time."""
        self.state.hours = hours
        if self.state.current is not None:
            target = self.state.targets[self.state.current]
            pending = sum(t.status == "pending" for t in self.state.targets)
            left = self.state.remaining_seconds or 0.0
            target.visit_budget_seconds = target.visit_seconds + max(0.0, left) / (pending + 1)
