"""Helpers of the multi-GPU benchmarks (`parallel-aa`, `parallel-scaling`): run the CLI, read a
finished run's figures. Not a benchmark of its own."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autokernel.benchmarks.record import REPO as ROOT


def autokernel(args: list[str], log: Path, timeout_s: float | None = None) -> tuple[int, float]:
    """Run `python -m autokernel ARGS`, its output appended to `log`: (exit status, seconds).
    Past `timeout_s` it gets SIGTERM (the loop stops after the experiments in flight)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("ANTHROPIC_API_KEY", None)  # the tuner, whatever the machine has
    started = time.monotonic()
    with open(log, "ab") as out:
        child = subprocess.Popen([sys.executable, "-m", "autokernel", *args], cwd=ROOT, env=env,
                                 stdout=out, stderr=subprocess.STDOUT)
        try:
            code = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.terminate()
            code = child.wait()
    return code, time.monotonic() - started


@dataclass
class RunFigures:
    """What one run did: experiments, their decisions, its active time and rates."""

    directory: Path
    rows: list[dict[str, str]]
    run_seconds: float  # the loop's active time (state.json), worker start-up included
    wall_seconds: float  # the command's, profiling/plan reading and the report included

    @property
    def experiments(self) -> int:
        return len(self.rows)

    @property
    def per_hour(self) -> float:
        return self.experiments / self.run_seconds * 3600 if self.run_seconds else 0.0

    @property
    def steady_per_hour(self) -> float:
        """Experiments an hour over their own seconds (proposal, verdict, record) per worker:
        the rate once the workers are up, start-up left out."""
        workers = max(1, len({r.get("gpu", "") for r in self.rows}))
        seconds = sum(float(r["seconds"] or 0) for r in self.rows)
        return self.experiments / seconds * 3600 * workers if seconds else 0.0

    def decisions(self) -> list[tuple[str, str, str]]:
        return [(r["tag"], r["description"], r["status"]) for r in self.rows]

    def per_gpu(self) -> dict[str, Any]:
        try:
            return json.loads((self.directory / ".cache" / "gpus.json").read_text())
        except (OSError, ValueError):
            return {}


def read_run(directory: Path, wall_seconds: float) -> RunFigures:
    with open(directory / "results.tsv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    state = json.loads((directory / "state.json").read_text())
    return RunFigures(directory, rows, float(state["run_seconds"]), wall_seconds)


def same_prefix(a: list[Any], b: list[Any]) -> int:
    """How many leading entries two sequences share."""
    count = 0
    for x, y in zip(a, b):
        if x != y:
            break
        count += 1
    return count
