"""lessons/<tag>.md: what each experiment on a target tried, its verdict and what it taught.

results.tsv says what happened; this file says what it means, in words an agent can act on. After
each experiment's row is written the journal adds the experiment's entry (`record_lesson`):

    ## #7 revert: 3.1% slower than the best (claude)
    - tried: split each row over two programs
    - hypothesis: plan 2: the row loop is latency-bound at N=4096
    - taught: BLOCK_N 128 -> 256 is 3.1% slower
    - agent's lesson: the loads, not the reduction, are the cost

An LLM's experiment gets a block like this one; a tuner step gets its header line alone, with the
takeaway on it, since a sweep has many steps and each says little.

The file is git-ignored (a revert keeps it) and rewritten whole through `atomic_write_text`, so a
kill leaves the old file or the new one, never a torn line. Entries are keyed by experiment
number: the journal finishes an interrupted experiment again on resume, and an entry already there
is not written twice. `lessons_for_prompt` gives the agents a bounded excerpt, most informative
entries first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from autokernel.agents.base import Attempt
from autokernel.files import atomic_write_text
from autokernel.loop.results import FAILED_STATUSES, ResultRow, sanitize

LESSONS_PROMPT_CHARS = 6_000  # the excerpt the agent's prompt carries; the file itself grows
ENTRY_PREFIX = "## #"
_ENTRY_KEY = re.compile(r"^## #(\d+)\b", re.MULTILINE)
TUNER_AGENTS = ("tuner",)
FAILED_WORDS = {"fail": "failed", "crash": "crashed", "timeout": "timed out",
                   "rejected": "rejected"}


@dataclass(frozen=True)
class Entry:
    experiment: int
    text: str  # the entry's lines, header first, ending in a newline

    @property
    def informative(self) -> int:
        """How much an agent learns from it: its own lesson or a keep, an LLM idea, a tuner step."""
        kept = self.text.startswith(f"{ENTRY_PREFIX}{self.experiment} keep:")
        if kept or "\n- agent's lesson:" in self.text:
            return 2
        return 1 if "\n- tried:" in self.text else 0


def read_entries(path: Path) -> list[Entry]:
    """The file's entries in file order; a missing or unreadable file has none."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    starts = [m.start() for m in _ENTRY_KEY.finditer(text)] + [len(text)]
    return [Entry(int(_ENTRY_KEY.match(text, a).group(1)),  # type: ignore[union-attr]
                  text[a:b].rstrip("\n") + "\n")
            for a, b in zip(starts, starts[1:])]


def record_lesson(path: Path, row: ResultRow, history: list[Attempt], *, lesson: str = "") -> bool:
    """Add experiment `row`'s entry to `path` unless it is there already; True if written.

    `history` is the target's attempts (it may already hold this row: only earlier ones count);
    the best among them is what the verdict and the takeaway compare with. A file that cannot be
    written is skipped: lessons advise the agent, the run must not stop for them."""
    entries = read_entries(path)
    if any(entry.experiment == row.experiment for entry in entries):
        return False
    best = _best_before(history, row.experiment)
    entry = format_entry(row, best, lesson=lesson)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # a write a kill cut short
            stale.unlink(missing_ok=True)
        head = path.read_text(encoding="utf-8") if path.exists() else _title(path)
        atomic_write_text(path, head.rstrip("\n") + "\n\n" + entry)
    except (OSError, UnicodeDecodeError):
        return False
    return True


def _title(path: Path) -> str:
    return (f"# Lessons on {path.stem}\n\nOne entry per experiment, oldest first, written by "
            "autokernel after each result.\n")


def _best_before(history: list[Attempt], experiment: int) -> Attempt | None:
    kept = [a for a in history if a.experiment < experiment and a.status in ("keep", "baseline")
            and a.latency_us is not None]
    return kept[-1] if kept else None


def format_entry(row: ResultRow, best: Attempt | None, *, lesson: str = "") -> str:
    """The experiment's entry: a header line (number, verdict, agent), then what it tried (an
    edit of another parent than the best says so in its description: '[from exp 12] ...')."""
    verdict = verdict_text(row, best)
    taught = takeaway(row, best)
    header = f"{ENTRY_PREFIX}{row.experiment} {row.status}: {verdict} ({row.agent or 'agent'})"
    if _is_tuner_step(row):
        return sanitize(f"{header}: {taught}", 400) + "\n"
    lines = [sanitize(header, 300), f"- tried: {sanitize(row.description, 300)}"]
    if row.hypothesis:
        lines.append(f"- hypothesis: {sanitize(row.hypothesis, 300)}")
    if taught:
        lines.append(f"- taught: {sanitize(taught, 300)}")
    if lesson.strip():
        lines.append(f"- agent's lesson: {sanitize(lesson, 300)}")
    return "\n".join(lines) + "\n"


def _is_tuner_step(row: ResultRow) -> bool:
    return row.agent in TUNER_AGENTS or row.description.startswith("tuner:")


def _objective(row: ResultRow) -> float | None:
    return row.objective_us if row.objective_us is not None else row.latency_us


def _ratio_to_best(row: ResultRow, best: Attempt | None) -> float | None:
    """Speedup over the best (>1 faster): the paired estimate when the loop measured one."""
    if row.vs_best is not None:
        return row.vs_best
    objective = _objective(row)
    if best is None or best.latency_us is None or not objective:
        return None
    return best.latency_us / objective


def verdict_text(row: ResultRow, best: Attempt | None) -> str:
    """'kept at 41.2 µs = 1.18× best', 'reverted: 3.1% slower', 'failed at stage S: reason'."""
    objective = _objective(row)
    ratio = _ratio_to_best(row, best)
    if row.status in FAILED_STATUSES:
        where = f" at stage {row.stage}" if row.stage else ""
        why = sanitize(row.reason or row.correctness, 160)
        return f"{FAILED_WORDS[row.status]}{where}: {why}"
    if row.status == "baseline":
        return f"the starter, {objective:.1f} µs" if objective is not None else "the starter"
    at = f" at {objective:.1f} µs" if objective is not None else ""
    if row.status == "keep":
        return f"kept{at}" + (f" = {ratio:.2f}× best" if ratio is not None else "")
    return f"reverted{at}: {_relative(ratio)}" if ratio is not None else f"reverted{at}"


def _relative(ratio: float) -> str:
    if ratio >= 1.0:
        return f"{(ratio - 1) * 100:.1f}% faster, within noise"
    return f"{(1 / ratio - 1) * 100:.1f}% slower"


def tunables_change(row: ResultRow, best: Attempt | None) -> str:
    """'BLOCK_N 128 -> 256, num_warps 4 -> 8': the tunables that differ from the best's."""
    before = best.tunables if best is not None else {}
    changed = [f"{name} {before[name]} -> {value}" if name in before else f"{name}={value}"
               for name, value in row.tunables.items() if before.get(name, object()) != value]
    return ", ".join(changed)


def takeaway(row: ResultRow, best: Attempt | None) -> str:
    """What the experiment taught, in one generated line."""
    change = tunables_change(row, best)
    subject = change if change and _is_tuner_step(row) else (
        f"this change ({change})" if change else "this change")
    if row.status == "baseline":
        return "the starting point of this target"
    if row.status in FAILED_STATUSES:
        where = f" {row.stage}" if row.stage else ""
        return f"{subject} fails{where}: {sanitize(row.reason or row.correctness, 160)}"
    if (best is not None and row.launch_digest and row.launch_digest == best.launch_digest):
        return f"{subject} did nothing: same launch digest as the best (exp {best.experiment})"
    ratio = _ratio_to_best(row, best)
    if ratio is None:
        return ""
    if row.status == "keep":
        return f"{subject} helps: {ratio:.2f}× the previous best"
    if ratio >= 1.0:
        return f"{subject} gives no measurable gain ({_relative(ratio)})"
    return f"{subject} is {_relative(ratio)}"


def lessons_for_prompt(path: Path, limit_chars: int = LESSONS_PROMPT_CHARS) -> str:
    """The entries an agent should read first, within `limit_chars`: its own lessons and keeps,
    then LLM ideas, then tuner steps, each group newest first; '' when there are none."""
    entries = read_entries(path)
    if not entries:
        return ""
    ranked = sorted(entries, key=lambda e: (e.informative, e.experiment), reverse=True)
    shown: list[str] = []
    used = 0
    for entry in ranked:
        if used + len(entry.text) > limit_chars:
            continue  # a shorter, less informative entry may still fit
        shown.append(entry.text)
        used += len(entry.text)
    left = len(entries) - len(shown)
    if left:
        shown.append(f"({left} older or less informative entries left out; read_file "
                     f"lessons/{path.name} has them all)\n")
    return "".join(shown)
