"""Where a problem is, read from its log while its child process runs.

The child writes the loop's log lines (`autokernel.loop.dashboard.PlainDashboard`), the line
`stopped: ...` when its optimization loop ends (`problem.run_stage`), then verify's lines. The
suite reads the log every few seconds and hands `problem_phase` of it to the CLI, which prints
each change of phase as a line and, on a terminal, keeps a progress line with the latest step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PROFILING = "profiling"
OPTIMIZING = "optimizing"
VERIFYING = "verifying"

_TIMESTAMP = re.compile(r"^\[\d\d:\d\d:\d\d\] ")
_LOOP_START = re.compile(r"^run \S+: \d+ targets?, ")
_TARGET = re.compile(r"^target (\S+)")
_EXPERIMENT = re.compile(r"^(exp \d+ \S+ [A-Z_]+)")


@dataclass(frozen=True)
class Phase:
    name: str  # PROFILING, OPTIMIZING or VERIFYING
    detail: str = ""  # the latest step: "exp 3 01_softmax KEEP", "timing eager, patched"

    def text(self) -> str:
        return f"{self.name}: {self.detail}" if self.detail else self.name


def problem_phase(log_text: str) -> Phase:
    """The phase and latest step of a problem, from its log so far."""
    name, detail = PROFILING, ""
    for raw in log_text.splitlines():
        line = _TIMESTAMP.sub("", raw.strip())
        if name == PROFILING and _LOOP_START.match(line):
            name, detail = OPTIMIZING, ""
        elif name == OPTIMIZING:
            if line.startswith("stopped: "):
                name, detail = VERIFYING, ""
            elif target := _TARGET.match(line):
                detail = f"{target[1]}: its next experiment running"
            elif experiment := _EXPERIMENT.match(line):
                detail = f"last {experiment[1]}"
        elif name == VERIFYING and line.startswith(("timing ", "model ")):
            detail = line.split(":")[0].split(";")[0]
    return Phase(name, detail)


def read_phase(log: Path) -> Phase:
    """`problem_phase` of the log file so far (profiling while it cannot be read)."""
    try:
        return problem_phase(log.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return Phase(PROFILING)
