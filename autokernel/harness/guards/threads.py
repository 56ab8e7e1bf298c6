"""Threads a candidate leaves running after a call."""

from __future__ import annotations

import threading


def live_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None and t.is_alive()}


def new_threads(before: set[int]) -> list[str]:
    return [f"{t.name} ({type(t).__name__})" for t in threading.enumerate()
            if t.ident not in before and t.is_alive()]
