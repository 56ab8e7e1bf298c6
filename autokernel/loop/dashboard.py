"""What the user sees while the loop runs: a rich Live dashboard on a terminal, log lines otherwise.

Both implement the same few hooks the runner calls. The live view shows the current target, the
experiment count and rate, the best speedup of every target, the last results and the time left;
the plain one prints one line per event, which is what a log file or CI wants. Both show each
experiment's phase, so the plateau rule can be followed: `explore` rows are not counted, and a
non-kept `search` row shows how many counted experiments in a row were not kept.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from autokernel.loop.keep_figure import KeepChain, decision_text, paired_cell
from autokernel.loop.results import sanitize
from autokernel.tables import ABBREVIATIONS, Column, fit_table
from autokernel.text import count_of, format_duration, format_speedup

if TYPE_CHECKING:
    from rich.console import Console

    from autokernel.loop.results import ResultRow
    from autokernel.loop.state import RunState, TargetState


class Dashboard(Protocol):
    def start(self, state: RunState) -> None: ...

    def stop(self) -> None: ...

    def message(self, text: str) -> None: ...

    def target_started(self, state: RunState, target: TargetState) -> None: ...

    def experiment(self, state: RunState, target: TargetState, row: ResultRow) -> None: ...

    def target_finished(self, state: RunState, target: TargetState) -> None: ...


# A target's status in state.json, as the dashboard and the run's first lines say it.
STATUS_WORDS = {"pending": "not started", "active": "in progress", "done": "done",
                "finishing": "finishing", "reopening": "reopening"}


def status_text(status: str) -> str:
    return STATUS_WORDS.get(status, status)


def _time_left(seconds: float | None) -> str:
    return "no limit" if seconds is None else format_duration(max(0.0, seconds))


def phase_text(row: ResultRow, not_kept_in_a_row: int | None = None) -> str:
    """Whether the plateau rule counted this experiment: `explore, not counted`, or `search` with
    how many counted experiments in a row were not kept (None: unknown). "" for a baseline."""
    if row.phase == "no_kernel":
        return "no kernel, not counted"
    if row.phase not in ("explore", "search"):
        return ""
    if row.status == "keep":  # a keep of either phase resets the count
        return row.phase
    if row.phase == "explore":
        return "explore, not counted"
    if not_kept_in_a_row is None:
        return "search"
    return f"search, {not_kept_in_a_row} not kept in a row"


def row_summary(row: ResultRow, not_kept_in_a_row: int | None = None,
                best_level: float | None = None) -> str:
    """One line about an experiment: number, target, verdict and phase, the keep rule's figure
    (`decision_text`), what was tried. `not_kept_in_a_row` is the target's plateau count after
    this experiment; `best_level` its best kernel × the baseline after a keep."""
    detail = decision_text(row)
    if row.status != "baseline" and row.correctness != "PASS":
        detail = sanitize(detail, 100)
    if row.status == "keep" and best_level is not None:
        detail += f"; best now {format_speedup(best_level)} the baseline"
    phase = phase_text(row, not_kept_in_a_row)
    verdict = row.status.upper() + (f" [{phase}]" if phase else "")
    return f"exp {row.experiment} {row.tag} {verdict}: {detail} — {row.description}"


def best_figures(target: TargetState) -> tuple[float | None, float | None, float | None]:
    """The best kernel's latency and speedups over eager and torch.compile at the target's
    primary shape: its results.tsv row's figures, as the report shows them."""
    best = target.best_result or {}
    return best.get("latency_us"), best.get("speedup_vs_eager"), best.get("speedup_vs_compile")


def target_summary(target: TargetState, best_level: float | None = None) -> str:
    """'12 experiments, 3 kept; best (exp 9) 1.52× the baseline (keep rule), 2.9× eager and
    1.1× compile at the primary shape'."""
    _, eager, compiled = best_figures(target)
    text = f"{count_of(target.experiments, 'experiment')}, {target.keeps} kept"
    if best_level is not None:
        which = f" (exp {target.best.experiment})" if target.best is not None else ""
        text += f"; best{which} {format_speedup(best_level)} the baseline (keep rule)"
    at_shape = [f"{format_speedup(value)} {label}" for value, label
                in ((eager, "eager"), (compiled, "compile")) if value is not None]
    if at_shape:
        text += f", {' and '.join(at_shape)} at the primary shape"
    return text


# How often a log repeats the per-GPU lines of a run with --gpus (autokernel.parallel.board).
WORKER_LINES_EVERY_S = 300.0


class PlainDashboard:
    """Log lines with a timestamp, for pipes, files and CI."""

    def __init__(self, stream: Any = None, history: Iterable[Any] = ()) -> None:
        self.stream = stream
        self.chain = KeepChain.of_rows(history)  # results.tsv so far (a resumed run's)
        self._workers_said: float | None = None

    def _print(self, text: str) -> None:
        stream = self.stream or sys.stdout
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=stream, flush=True)

    def start(self, state: RunState) -> None:
        left = state.remaining_seconds
        self._print(f"run {state.run_tag}: {count_of(len(state.targets), 'target')}, "
                    f"time left {_time_left(left)}, next experiment {state.next_experiment}")

    def stop(self) -> None:
        return None

    def message(self, text: str) -> None:
        self._print(text)

    def target_started(self, state: RunState, target: TargetState) -> None:
        visit = f" (visit {target.visits})" if target.visits > 1 else ""
        budget = (f", up to {format_duration(target.visit_budget_seconds)}"
                  if target.visit_budget_seconds is not None else "")
        self._print(f"target {target.tag}{visit}{budget}")

    def experiment(self, state: RunState, target: TargetState, row: ResultRow) -> None:
        self.chain.add(row)
        self._print(row_summary(row, target.consecutive_reverts, self.chain.level(target.tag)))

    def workers(self, lines: list[str], *, always: bool = False) -> None:
        """The per-GPU lines of a run with --gpus: which target each GPU judges, its experiments
        an hour, its idle time. Shown at the start, every few minutes and at the end."""
        now = time.monotonic()
        if not always and self._workers_said is not None \
                and now - self._workers_said < WORKER_LINES_EVERY_S:
            return
        self._workers_said = now
        for line in lines:
            self._print(line)

    def target_finished(self, state: RunState, target: TargetState) -> None:
        self._print(f"finished {target.tag}: "
                    f"{target_summary(target, self.chain.level(target.tag))}; moved on: "
                    f"{target.stop_reason}")


# The live view's tables: figures and names never split, headers abbreviated on a narrow
# terminal with their legend below (autokernel.tables).
TARGET_COLUMNS = (
    Column("target"), Column("status"),
    Column("experiments", "exp", justify="right"), Column("kept", justify="right"),
    Column("× baseline", "×base", justify="right", legend=ABBREVIATIONS["×base"]),
    Column("× eager", "×eager", justify="right",
           legend="the best kernel over eager PyTorch at the primary shape"),
    Column("× compile", "×compile", justify="right",
           legend="the best kernel over torch.compile at the primary shape"),
    Column("% of peak", "%peak", justify="right"), Column("time", justify="right"),
    Column("stop", wrap=True),
)
RECENT_COLUMNS = (
    Column("exp", justify="right", keep_empty=True), Column("target"), Column("verdict"),
    # explore: not counted by the plateau rule; search N: the Nth counted non-keep in a row
    Column("phase"),
    Column("× best (95% CI)", "×best", legend=ABBREVIATIONS["×best"]),
    Column("what", wrap=True),
)


class LiveDashboard:
    """A rich Live view, redrawn on every event and a few times a second."""

    def __init__(self, console: Console, *, title: str, device: str, agent: str,
                 timing_note: str = "", last_rows: int = 8, history: Iterable[Any] = ()) -> None:
        self.console = console
        self.title = title
        self.device = device
        self.agent = agent
        self.timing_note = timing_note
        # Each row with the target's plateau count right after it (the count moves on).
        self.rows: deque[tuple[ResultRow, int]] = deque(maxlen=last_rows)
        self.messages: deque[str] = deque(maxlen=3)
        self.worker_lines: list[str] = []  # a run with --gpus: one line per GPU
        self.state: RunState | None = None
        self.chain = KeepChain.of_rows(history)
        self._live: Any = None
        self._session_start = time.monotonic()
        self._session_experiments = 0
        # rich redraws from its own thread; the loop's thread changes what is drawn.
        self._lock = threading.RLock()  # RLock: the Ctrl-C handler may message mid-update

    def start(self, state: RunState) -> None:
        from rich.live import Live

        self.state = state
        self._live = Live(console=self.console, refresh_per_second=2, transient=False,
                          get_renderable=self.render)
        self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()  # draws the final frame
            self._live = None

    def message(self, text: str) -> None:
        with self._lock:
            self.messages.append(f"[{time.strftime('%H:%M:%S')}] {text}")

    def target_started(self, state: RunState, target: TargetState) -> None:
        self.state = state
        self.message(f"target {target.tag} (visit {target.visits})")

    def experiment(self, state: RunState, target: TargetState, row: ResultRow) -> None:
        with self._lock:
            self.state = state
            self.chain.add(row)
            self.rows.append((row, target.consecutive_reverts))
            self._session_experiments += 1

    def target_finished(self, state: RunState, target: TargetState) -> None:
        self.state = state
        self.message(f"finished {target.tag}: {target.stop_reason}")

    def workers(self, lines: list[str], *, always: bool = False) -> None:
        with self._lock:
            self.worker_lines = list(lines)

    def render(self) -> Any:
        with self._lock:
            return self._render()

    def _render(self) -> Any:
        from rich.console import Group
        from rich.text import Text

        state = self.state
        if state is None:
            return Text("starting…")
        width = self.console.width
        elapsed = time.monotonic() - self._session_start
        rate = self._session_experiments / elapsed * 3600 if elapsed > 30 else None
        current = state.targets[state.current].tag if state.current is not None else "–"
        if self.worker_lines:  # --gpus: every open target is under way at once
            current = ", ".join(t.tag for t in state.targets if t.status == "active") or "–"
        header = Text.assemble(
            (f"{self.title}", "bold"),
            f"   device {self.device}   agent {self.agent}   target ",
            (current, "bold cyan"),
            f"   experiments {state.next_experiment}",
            f" ({rate:.0f} an hour)" if rate is not None else "",
            "   time left ",
            (_time_left(state.remaining_seconds), "bold"),
        )
        target_rows, styles = [], []
        for position, t in enumerate(state.targets):
            best = t.best
            _, eager, compiled = best_figures(t)  # as results.tsv and the report
            level = self.chain.level(t.tag)
            target_rows.append([
                t.tag, status_text(t.status), str(t.experiments), str(t.keeps),
                format_speedup(level) if level is not None else "–",
                format_speedup(eager) if eager else "–",
                format_speedup(compiled) if compiled else "–",
                f"{best.pct_peak_best_known:.0f}%" if best and best.pct_peak_best_known
                is not None else "–",
                format_duration(t.seconds), t.stop_rule or "",
            ])
            styles.append("bold cyan" if state.current == position else None)
        colors = {"keep": "green", "baseline": "blue", "revert": "white"}
        recent_rows = []
        for row, not_kept_in_a_row in self.rows:
            counted = row.phase == "search" and row.status not in ("keep", "baseline")
            figure = paired_cell(row) if row.status != "baseline" else ""
            what = row.description if row.status in colors else \
                f"{row.description} ({sanitize(row.reason, 100)})"
            recent_rows.append([
                str(row.experiment), row.tag,
                Text(row.status, style=colors.get(row.status, "red")),
                f"search {not_kept_in_a_row}" if counted else row.phase, figure, what,
            ])
        parts: list[Any] = [header]
        if self.timing_note:
            parts.append(Text(self.timing_note, style="yellow"))
        parts.append(fit_table(TARGET_COLUMNS, target_rows, width, row_styles=styles))
        parts.append(Text(""))
        parts.append(fit_table(RECENT_COLUMNS, recent_rows, width, title="last experiments"))
        if self.worker_lines:
            parts += [Text("workers", style="bold")] + [Text(line) for line in self.worker_lines]
        parts += [Text(m, style="dim") for m in self.messages]
        parts.append(Text("Ctrl-C: stop after this experiment (twice: abort it)", style="dim"))
        return Group(*parts)


def make_dashboard(console: Console, *, title: str, device: str, agent: str,
                   timing_note: str = "", live: bool | None = None,
                   history: Iterable[Any] = ()) -> Dashboard:
    """The live view when the console is a terminal (or `live` says so), else log lines.
    `history`: the run's results.tsv rows so far, for a resumed run's figures."""
    use_live = console.is_terminal if live is None else live
    if use_live:
        return LiveDashboard(console, title=title, device=device, agent=agent,
                             timing_note=timing_note, history=history)
    return PlainDashboard(stream=console.file, history=history)
