"""The run state (state.json): where the run is, per-target progress, and the experiment journal.

Written atomically (temporary file, fsync, os.replace, fsync of the directory), so after a power
loss the file is either the old or the new version, never a mix. It is git-ignored: resetting the
workspace to a kept commit must not roll the state back.

The journal (`in_flight`) makes an interrupted experiment recoverable. An experiment walks through

    (no in_flight)  not started
    "written"       the proposal (full source) is journaled, then kernel.py is written
    "benchmarked"   the harness verdict and the keep/revert decision are journaled
    "committed"     a keep (or baseline) was committed; the commit is journaled
    (row in results.tsv)  recorded; then a revert resets the tree, and one atomic write clears
                    in_flight, advances the experiment counter and updates the target's figures

and `autokernel resume` picks up from whichever point it reached (see `runner.repair`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autokernel.files import atomic_write_text

STATE_VERSION = 1
TARGET_STATUSES: tuple[str, ...] = ("pending", "reopening", "active", "finishing", "done")
PHASES: tuple[str, ...] = ("written", "benchmarked", "committed")


@dataclass
class Measurement:
    """A kernel's figures at the target's profiled shapes, as the keep rule and report use them."""

    experiment: int
    commit: str
    latency_us: float | None  # the objective: call-weighted over the timed shapes
    iqr_us: float | None
    primary_latency_us: float | None = None  # at the primary shape, as in results.tsv
    eager_us: float | None = None
    compile_us: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    pct_peak: float | None = None
    pct_peak_measured: float | None = None
    passed: bool = True
    shapes: int = 1  # timed shapes the objective is weighted over
    gpu: str = ""  # the worker that timed it (results.tsv's gpu column; "" on a one-device run)

    @property
    def pct_peak_best_known(self) -> float | None:
        """Against the calibrated ceiling when the harness measured one, else the datasheet."""
        return self.pct_peak_measured if self.pct_peak_measured is not None else self.pct_peak


@dataclass
class TargetState:
    index: int  # position in the plan's targets (not in RunState.targets: --only/--skip)
    rank: int
    kernel_type: str
    tag: str  # "01_rmsnorm": results.tsv tag and kernels/ file stem
    status: str = "pending"
    visits: int = 0  # how many times the loop opened this target (revisits after a first pass)
    seconds: float = 0.0  # the target's own clock over all visits
    visit_seconds: float = 0.0
    visit_budget_seconds: float | None = None
    experiments: int = 0  # after the baseline, over all visits
    keeps: int = 0
    visit_keeps: int = 0
    consecutive_reverts: int = 0
    agent_exhausted: bool = False
    cuda_starter_tried: bool = False  # --backend auto: its CUDA starter ran as an experiment
    baseline: Measurement | None = None
    best: Measurement | None = None
    best_commit: str | None = None  # the commit whose kernel.py is this target's best
    best_result: dict[str, Any] | None = None  # the harness verdict of the best (for agents)
    timing_meaningful: bool = True
    stop_rule: str | None = None
    stop_reason: str = ""
    stops: list[dict[str, Any]] = field(default_factory=list)  # one per visit
    kernel_file: str | None = None  # kernels/01_rmsnorm.py once finished with a passing kernel
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TargetState:
        data = dict(data)
        for key in ("baseline", "best"):
            if data.get(key) is not None:
                data[key] = Measurement(**data[key])
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class InFlight:
    """The journal entry of the experiment being run."""

    experiment: int
    target: int  # index into RunState.targets
    phase: str
    source: str  # the full proposed kernel.py
    description: str
    agent: str
    baseline: bool = False
    sweep: bool = False  # a cheap follow-up of an earlier idea: the plateau rule skips it
    hypothesis: str = ""
    lesson: str = ""  # the agent's own lesson, for lessons.md (autokernel.loop.lessons)
    tunables: dict[str, Any] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    bench_attempts: int = 0  # harness runs started for it (a run killed mid-bench counts)
    seconds_before: float = 0.0  # experiment time spent before an interruption
    result: dict[str, Any] | None = None
    verdict: str | None = None  # a results.tsv status
    verdict_reason: str = ""
    vs_best: list[float] | None = None  # paired speedup over the best: estimate, low, high
    commit: str | None = None
    gpu: str = ""  # the worker that judged it (results.tsv's gpu column)

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"unknown journal phase {self.phase!r}")


@dataclass
class RunState:
    run_tag: str
    branch: str
    head: str  # the last kept commit: HEAD of the branch at every rest point
    targets: list[TargetState]
    version: int = STATE_VERSION
    next_experiment: int = 0
    current: int | None = None  # position in `targets` of the target being optimized
    visit_round: int = 1  # 1 = first pass over the targets, 2+ = revisits
    rounds_without_keep: int = 0
    run_seconds: float = 0.0  # active time over all sessions (the --hours budget counts this)
    hours: float | None = None
    in_flight: InFlight | None = None
    finished: bool = False
    stop_reason: str = ""
    sessions: int = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        data = dict(data)
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"state.json version {data.get('version')!r} is not {STATE_VERSION}")
        data["targets"] = [TargetState.from_dict(t) for t in data["targets"]]
        if data.get("in_flight") is not None:
            data["in_flight"] = InFlight(**data["in_flight"])
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self, path: str | Path) -> None:
        atomic_write_text(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> RunState:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    @property
    def remaining_seconds(self) -> float | None:
        return None if self.hours is None else self.hours * 3600.0 - self.run_seconds
