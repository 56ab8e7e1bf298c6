"""Ctrl-C and SIGTERM during a run: the first asks the loop to stop after the experiment in
progress; a second Ctrl-C aborts that experiment (KeyboardInterrupt, which the runner turns into
a clean stop). Handlers are installed only on the main thread, where Python delivers signals."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any


class StopSignals:
    def __init__(self, on_first: Callable[[], None]) -> None:
        self.on_first = on_first
        self.requested = False
        self._count = 0
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._count += 1
        if self._count >= 2 and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True
        self.on_first()
