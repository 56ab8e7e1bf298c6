"""results.tsv: one row per experiment, kept or not, append-only.

The first ten columns are RightNow AutoKernel's format, in its order, so tools written for it read
ours. Definitions that differ from a first guess:

- `speedup_vs_pytorch` is against *eager* stock PyTorch (the registry's `stock` path, e.g.
  F.rms_norm) at the same shape and dtype, timed by the same protocol; `speedup_vs_compile`, next
  to it, is against `torch.compile` of that same path.
- `pct_peak` is against the datasheet ceiling (compute for compute-bound types, bandwidth
  otherwise); `pct_peak_measured` against the ceiling calibrated on this GPU.
- `latency_us`, `throughput_tflops` and the percentages are at the target's primary profiled shape;
  `objective_us`, what the keep rule compares, is the latency over all timed shapes weighted by
  each shape's share of the target's profiled time (equal to `latency_us` for a single shape).
- `tag` names the target (`01_rmsnorm`, as its file under kernels/), since one kernel type can be
  several targets at different shapes.
- `latency_us` and `objective_us` are device time (the host kept out of the timed interval);
  `launch_us` and `eager_launch_us` are the host launch cost of the kernel and of eager PyTorch
  (one synchronous call's wall time minus its device time), a separate figure.
- `vs_best` is the median speedup over the target's best kernel when this experiment ran, timed
  in the same rounds, with its 95% bootstrap interval in `vs_best_lo`..`vs_best_hi`; the keep
  rule keeps when `vs_best_lo` > 1 + the minimum gain.
- `launch_digest` fingerprints what one call launches at the primary shape (compiled Triton
  kernels, grids, scalar arguments, in order): two rows with the same digest ran the same kernels,
  whatever their sources say.
- `phase` says whether a non-kept experiment counts toward the plateau rule (`PHASES` below);
  files written before it existed have no value there, and read as before.

The file is git-ignored in the workspace, so `git reset --hard` never touches it; every row is
flushed and fsynced before the loop moves on, and a row torn by a power loss is cut on resume.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

# What happened to an experiment. `keep` and `baseline` rows point at a commit on the branch.
STATUSES: tuple[str, ...] = ("baseline", "keep", "revert", "fail", "crash", "timeout", "rejected")
COMMITTED_STATUSES: frozenset[str] = frozenset({"baseline", "keep"})
# No kernel passed the harness (or the agent produced none): nothing was measured to compare.
FAILED_STATUSES: frozenset[str] = frozenset({"fail", "crash", "timeout", "rejected"})

# Which experiments the plateau rule (`--max-consecutive-reverts`) counts. A sample taken to teach
# the search where the space is good (the tuner's initial design, its sweep of the tunables of a
# structure Claude wrote) is not an idea that failed, so only `search` rows count; a keep of any
# phase resets the count.
PHASES: dict[str, str] = {
    "baseline": "the target's starter, experiment 0 of the target",
    "explore": "a sample for the search (the tuner's initial design or its sweep of a new "
               "structure): not counted by the plateau rule",
    "search": "a proposal the agent chose (the tuner's model-guided pick, an LLM edit): "
              "counted by the plateau rule when not kept",
    "no_kernel": "the agent gave no kernel (an API error, a reply without one): nothing was "
                 "judged, so not counted (the agent's own failure streak hands the run to the "
                 "tuner)",
}
COUNTED_PHASE = "search"


def experiment_phase(status: str, sweep: bool, judged: bool = True) -> str:
    """The `phase` of an experiment from its status, the agent's `sweep` mark, and whether the
    harness judged a kernel at all."""
    if status == "baseline":
        return "baseline"
    if not judged:
        return "no_kernel"
    return "explore" if sweep else COUNTED_PHASE


def sanitize(text: str, limit: int = 400) -> str:
    """One TSV cell: no tabs or newlines, bounded length."""
    flat = " ".join(str(text).replace("\t", " ").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if value != value:  # NaN
            return ""
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return sanitize(value)


@dataclass(kw_only=True)
class ResultRow:
    """One results.tsv row. Its fields, in this order, are the file's columns: the schema is
    defined here once (COLUMNS, NUMERIC_COLUMNS and readers derive from it)."""

    # RightNow AutoKernel's ten columns, in its order.
    experiment: int
    tag: str
    kernel_type: str
    throughput_tflops: float | None = None
    latency_us: float | None = None
    pct_peak: float | None = None
    speedup_vs_pytorch: float | None = None
    correctness: str  # the harness status: PASS, FAIL, CRASH, TIMEOUT, REJECTED, SKIPPED
    peak_vram_mb: float | None = None
    description: str
    # autokernel's own.
    status: str
    phase: str = ""  # PHASES; "" only in rows of files written before the column existed
    target_rank: int
    shape: str
    dtype: str
    speedup_vs_compile: float | None = None
    pct_peak_measured: float | None = None
    objective_us: float | None = None
    vs_best: float | None = None
    vs_best_lo: float | None = None
    vs_best_hi: float | None = None
    launch_us: float | None = None
    eager_launch_us: float | None = None
    agent: str
    seconds: float | None = None
    harness_seconds: float | None = None
    commit: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    stage: str = ""
    reason: str = ""
    tunables: dict[str, Any] = field(default_factory=dict)
    launch_digest: str = ""
    hypothesis: str = ""  # why the agent expected it to be faster; read back into its history
    # Where it was judged: "" on a run's one device; the worker's GPU ("0", "2"), interpreter
    # worker ("cpu1") or Ray worker ("10.0.0.5/0") of a run with --gpus (autokernel.parallel).
    gpu: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; one of {', '.join(STATUSES)}")
        if self.phase and self.phase not in PHASES:
            raise ValueError(f"unknown phase {self.phase!r}; one of {', '.join(PHASES)}")

    @staticmethod
    def phase_of(status: str, sweep: bool, judged: bool = True) -> str:
        """`experiment_phase`, reachable wherever ResultRow is imported."""
        return experiment_phase(status, sweep, judged)

    def to_line(self) -> str:
        return "\t".join(_cell(getattr(self, name)) for name in COLUMNS) + "\n"


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(ResultRow))
RIGHTNOW_COLUMNS: tuple[str, ...] = COLUMNS[:10]
EXTRA_COLUMNS: tuple[str, ...] = COLUMNS[10:]
# The columns a reader parses as numbers, from ResultRow's own annotations (one schema).
NUMERIC_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(ResultRow) if str(f.type).split(" |")[0] in ("int", "float"))


def header_line() -> str:
    return "\t".join(COLUMNS) + "\n"


def _fsync_append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


class ResultsLog:
    """Append-only results.tsv with durable rows and a cheap "is experiment N recorded?"."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._experiments: set[int] = set()
        self._last: int | None = None

    @classmethod
    def create(cls, path: str | Path) -> ResultsLog:
        log = cls(path)
        if log.path.exists():
            raise FileExistsError(f"{log.path} already exists")
        _fsync_append(log.path, header_line())
        return log

    @classmethod
    def open(cls, path: str | Path) -> ResultsLog:
        """Open an existing log, cutting a trailing row that a crash left half-written."""
        log = cls(path)
        log.repair()
        log.upgrade_columns()
        for row in log.rows():
            log._note(int(row["experiment"]))
        return log

    def _note(self, experiment: int) -> None:
        self._experiments.add(experiment)
        self._last = experiment if self._last is None else max(self._last, experiment)

    def upgrade_columns(self) -> bool:
        """Rewrite a results.tsv written by an older version with today's columns (new columns
        empty in old rows), so a resumed run appends rows that line up. True if it rewrote."""
        from autokernel.files import atomic_write_text

        text = self.path.read_text(encoding="utf-8")
        header = text.split("\n", 1)[0].split("\t")
        if header == list(COLUMNS):
            return False
        unknown = [c for c in header if c not in COLUMNS]
        if unknown:
            raise ValueError(f"{self.path} has columns this version does not know: "
                             f"{', '.join(unknown[:5])}")
        rows = self.rows()
        lines = [header_line()] + ["\t".join(row.get(c) or "" for c in COLUMNS) + "\n"
                                   for row in rows]
        atomic_write_text(self.path, "".join(lines))
        return True

    def repair(self) -> bool:
        """Truncate an incomplete last line (no newline, or too few cells). True if it cut."""
        data = self.path.read_bytes() if self.path.exists() else b""
        if not data:
            _fsync_append(self.path, header_line())
            return True
        cut = len(data)
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
        else:
            last_start = data.rfind(b"\n", 0, len(data) - 1) + 1
            last = data[last_start:].decode("utf-8", errors="replace").rstrip("\n")
            columns = data.split(b"\n", 1)[0].count(b"\t") + 1  # an older file has fewer
            if last.count("\t") != columns - 1:
                cut = last_start
        if cut == len(data):
            return False
        with open(self.path, "r+b") as handle:
            handle.truncate(cut)
            handle.flush()
            os.fsync(handle.fileno())
        if cut == 0:
            _fsync_append(self.path, header_line())
        return True

    def append(self, row: ResultRow) -> None:
        if row.experiment in self._experiments:
            raise ValueError(f"experiment {row.experiment} is already in {self.path.name}")
        _fsync_append(self.path, row.to_line())
        self._note(row.experiment)

    def has(self, experiment: int) -> bool:
        return experiment in self._experiments

    @property
    def last_experiment(self) -> int | None:
        return self._last

    def rows(self) -> list[dict[str, str]]:
        text = self.path.read_text(encoding="utf-8")
        reader = csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
        return [dict(row) for row in reader]


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """All rows of a results.tsv as strings keyed by column (for reports and tests)."""
    return ResultsLog(path).rows()
