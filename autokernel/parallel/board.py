"""Per-GPU progress: which target each worker judges, its experiments per hour, its idle time.

The head keeps a `Board` while it runs and writes it to `.cache/gpus.json` after every change
(the workers' pids are there too: what a test kills); the dashboard shows `lines()`, and the
report reads the file back (`read_board`), adding up the sessions of a resumed run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autokernel.files import atomic_write_text
from autokernel.text import format_duration

BOARD_FILE = "gpus.json"  # under the workspace's .cache/


@dataclass
class WorkerStats:
    label: str
    device_name: str = ""
    pid: int | None = None
    host: str = ""
    target: str = ""  # the target of the job in flight ("" idle)
    busy_since: float | None = None  # clock time the job in flight started
    experiments: int = 0  # verdicts recorded, over every session
    busy_seconds: float = 0.0
    idle_seconds: float = 0.0
    lost: int = 0  # times the worker died and its job was judged again
    targets: dict[str, int] = field(default_factory=dict)  # experiments per target

    @property
    def per_hour(self) -> float | None:
        total = self.busy_seconds + self.idle_seconds
        return self.experiments / total * 3600.0 if total > 30 else None

    @property
    def idle_share(self) -> float | None:
        total = self.busy_seconds + self.idle_seconds
        return self.idle_seconds / total if total > 0 else None


class Board:
    """The workers' progress in this session, on top of what earlier sessions left in `path`."""

    def __init__(self, path: Path | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.clock = clock
        self.workers: dict[str, WorkerStats] = dict(read_board(path)) if path else {}
        self._last = clock()

    def join(self, label: str, *, device_name: str, pid: int, host: str) -> WorkerStats:
        stats = self.workers.setdefault(label, WorkerStats(label))
        stats.device_name, stats.pid, stats.host = device_name, pid, host
        stats.target, stats.busy_since = "", None
        self.save()
        return stats

    def tick(self) -> None:
        """Add the time since the last tick to each worker's busy or idle seconds."""
        now = self.clock()
        delta, self._last = max(0.0, now - self._last), now
        for stats in self.workers.values():
            if stats.pid is None:
                continue
            if stats.target:
                stats.busy_seconds += delta
            else:
                stats.idle_seconds += delta

    def busy(self, label: str, target: str) -> None:
        self.tick()
        stats = self.workers[label]
        stats.target, stats.busy_since = target, self.clock()
        self.save()

    def done(self, label: str, *, recorded: bool) -> None:
        """The worker's job came back (`recorded`: as an experiment, not to be judged again)."""
        self.tick()
        stats = self.workers[label]
        if recorded:
            stats.experiments += 1
            stats.targets[stats.target] = stats.targets.get(stats.target, 0) + 1
        stats.target, stats.busy_since = "", None
        self.save()

    def lost(self, label: str) -> None:
        self.tick()
        stats = self.workers[label]
        stats.lost += 1
        stats.target, stats.busy_since, stats.pid = "", None, None
        self.save()

    def save(self) -> None:
        if self.path is None:
            return
        data = {label: asdict(stats) for label, stats in self.workers.items()}
        atomic_write_text(self.path, json.dumps(data, indent=1) + "\n", durable=False)

    def lines(self) -> list[str]:
        """One line per worker: 'gpu 1 (NVIDIA H200): 02_rmsnorm for 12 s; 40 experiments, 310
        an hour, idle 2%'."""
        self.tick()
        return [worker_line(stats, self.clock()) for stats in self.workers.values()]


def worker_line(stats: WorkerStats, now: float | None = None) -> str:
    name = f"{'worker' if 'cpu' in stats.label else 'gpu'} {stats.label}"
    if stats.device_name and stats.device_name != "cpu":
        name += f" ({stats.device_name})"
    if stats.pid is None:
        doing = "gone"
    elif stats.target:
        took = "" if stats.busy_since is None or now is None else \
            f" for {format_duration(now - stats.busy_since)}"
        doing = f"{stats.target}{took}"
    else:
        doing = "idle"
    rate = f", {stats.per_hour:.0f} an hour" if stats.per_hour is not None else ""
    idle = f", idle {stats.idle_share:.0%}" if stats.idle_share is not None else ""
    lost = f", lost {stats.lost}×" if stats.lost else ""
    return f"{name}: {doing}; {stats.experiments} experiments{rate}{idle}{lost}"


def read_board(path: Path | None) -> dict[str, WorkerStats]:
    """The workers' figures a run left in `path` (none when there is no such file)."""
    if path is None:
        return {}
    try:
        data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    known = set(WorkerStats.__dataclass_fields__)
    workers = {}
    for label, entry in data.items():
        if isinstance(entry, dict):
            stats = WorkerStats(**{k: v for k, v in entry.items() if k in known})
            stats.target, stats.busy_since = "", None  # a session that ended judges nothing
            workers[label] = stats
    return workers


def report_rows(path: Path) -> list[list[str]]:
    """The report's per-GPU table: worker, model, experiments, an hour, idle, lost, targets."""
    rows = []
    for stats in read_board(path).values():
        targets = ", ".join(f"{tag} {n}" for tag, n in sorted(stats.targets.items()))
        rows.append([stats.label, stats.device_name or "–", str(stats.experiments),
                     f"{stats.per_hour:.0f}" if stats.per_hour is not None else "–",
                     f"{stats.idle_share:.0%}" if stats.idle_share is not None else "–",
                     format_duration(stats.idle_seconds), str(stats.lost), targets or "–"])
    return rows


REPORT_HEADER = ["worker", "model", "experiments", "an hour", "idle", "idle time", "lost",
                 "experiments per target"]
