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
from typing import TYPE_CHECKING, Any, Protocol

from autokernel.text import count_of, format_duration, format_latency, format_speedup

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


def _fmt(value: float | None, pattern: str, empty: str = "–") -> str:
    return empty if value is None else pattern.format(value)


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


def row_summary(row: ResultRow, not_kept_in_a_row: int | None = None) -> str:
    """One line about an experiment: number, target, verdict and phase, figures, what was tried.
    `not_kept_in_a_row` is the target's plateau count after this experiment."""
    figures = []
    if row.latency_us is not None:
        figures.append(f"{row.latency_us:.1f} µs")
    if row.objective_us is not None and row.latency_us is not None and (
            abs(row.objective_us - row.latency_us) > 1e-9 * row.latency_us):
        figures.append(f"{row.objective_us:.1f} µs weighted over the timed shapes")
    if row.speedup_vs_pytorch is not None:
        figures.append(f"{format_speedup(row.speedup_vs_pytorch)} eager")
    if row.speedup_vs_compile is not None:
        figures.append(f"{format_speedup(row.speedup_vs_compile)} compile")
    detail = ", ".join(figures) or (row.reason[:80] if row.reason else row.correctness)
    phase = phase_text(row, not_kept_in_a_row)
    verdict = row.status.upper() + (f" [{phase}]" if phase else "")
    return f"exp {row.experiment} {row.tag} {verdict}: {detail} — {row.description}"


def best_figures(target: TargetState) -> tuple[float | None, float | None, float | None]:
    """The best kernel's latency and speedups over eager and torch.compile at the target's
    primary shape: its results.tsv row's figures, as the report shows them."""
    best = target.best_result or {}
    return best.get("latency_us"), best.get("speedup_vs_eager"), best.get("speedup_vs_compile")


def target_summary(target: TargetState) -> str:
    _, eager, compiled = best_figures(target)
    parts = [f"{count_of(target.experiments, 'experiment')}, {target.keeps} kept"]
    if eager is not None:
        parts.append(f"best {format_speedup(eager)} eager")
    if compiled is not None:
        parts.append(f"{format_speedup(compiled)} compile")
    return ", ".join(parts)


class PlainDashboard:
    """Log lines with a timestamp, for pipes, files and CI."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream

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
        self._print(row_summary(row, target.consecutive_reverts))

    def target_finished(self, state: RunState, target: TargetState) -> None:
        self._print(f"finished {target.tag}: {target_summary(target)} ({target.stop_reason})")


class LiveDashboard:
    """A rich Live view, redrawn on every event and a few times a second."""

    def __init__(self, console: Console, *, title: str, device: str, agent: str,
                 timing_note: str = "", last_rows: int = 8) -> None:
        self.console = console
        self.title = title
        self.device = device
        self.agent = agent
        self.timing_note = timing_note
        # Each row with the target's plateau count right after it (the count moves on).
        self.rows: deque[tuple[ResultRow, int]] = deque(maxlen=last_rows)
        self.messages: deque[str] = deque(maxlen=3)
        self.state: RunState | None = None
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
            self.rows.append((row, target.consecutive_reverts))
            self._session_experiments += 1

    def target_finished(self, state: RunState, target: TargetState) -> None:
        self.state = state
        self.message(f"finished {target.tag}: {target.stop_reason}")

    def render(self) -> Any:
        with self._lock:
            return self._render()

    def _render(self) -> Any:
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text

        state = self.state
        if state is None:
            return Text("starting…")
        elapsed = time.monotonic() - self._session_start
        rate = self._session_experiments / elapsed * 3600 if elapsed > 30 else None
        current = state.targets[state.current].tag if state.current is not None else "–"
        header = Text.assemble(
            (f"{self.title}", "bold"),
            f"   device {self.device}   agent {self.agent}   target ",
            (current, "bold cyan"),
            f"   experiments {state.next_experiment}",
            f" ({rate:.0f}/h)" if rate is not None else "",
            "   time left ",
            (_time_left(state.remaining_seconds), "bold"),
        )
        from rich import box

        # Fixed-width figures that never wrap, and the free text last: the view stays one line
        # per target and per experiment on an 80-column terminal.
        targets = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=True,
                        padding=(0, 1), collapse_padding=True)
        targets.add_column("target", no_wrap=True, overflow="ellipsis", min_width=10)
        widths = {"status": 7, "exp/kept": 8, "best": 8, "×eager": 7, "×compile": 8,
                  "%peak": 5, "time": 7}
        for column, width in widths.items():
            targets.add_column(column, no_wrap=True, min_width=width,
                               justify="left" if column == "status" else "right")
        targets.add_column("stop", no_wrap=True, overflow="ellipsis", ratio=1)
        for position, t in enumerate(state.targets):
            best = t.best
            latency, eager, compiled = best_figures(t)  # as results.tsv and the report
            style = "bold cyan" if state.current == position else None
            targets.add_row(
                t.tag, t.status, f"{t.experiments}/{t.keeps}",
                format_latency(latency),
                format_speedup(eager) if eager else "–",
                format_speedup(compiled) if compiled else "–",
                _fmt(best.pct_peak_best_known if best else None, "{:.0f}"),
                format_duration(t.seconds), t.stop_rule or "",
                style=style,
            )
        recent = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=True,
                       padding=(0, 1), collapse_padding=True)
        recent.add_column("exp", no_wrap=True, justify="right", min_width=3)
        recent.add_column("target", no_wrap=True, overflow="ellipsis", max_width=18)
        recent.add_column("verdict", no_wrap=True, min_width=8)
        # explore: not counted by the plateau rule; search N: the Nth counted non-keep in a row
        recent.add_column("phase", no_wrap=True, min_width=7)
        recent.add_column("latency", no_wrap=True, justify="right", min_width=8)
        recent.add_column("×eager", no_wrap=True, justify="right", min_width=7)
        recent.add_column("what", no_wrap=True, overflow="ellipsis", ratio=1)
        colors = {"keep": "green", "baseline": "blue", "revert": "white"}
        for row, not_kept_in_a_row in self.rows:
            counted = row.phase == "search" and row.status not in ("keep", "baseline")
            recent.add_row(
                str(row.experiment), row.tag,
                Text(row.status, style=colors.get(row.status, "red")),
                f"search {not_kept_in_a_row}" if counted else row.phase,
                format_latency(row.latency_us),
                format_speedup(row.speedup_vs_pytorch) if row.speedup_vs_pytorch else "–",
                row.description if row.status in colors else f"{row.description} ({row.reason})",
            )
        parts: list[Any] = [header]
        if self.timing_note:
            parts.append(Text(self.timing_note, style="yellow"))
        parts += [targets, Panel(recent, title="last experiments", title_align="left")]
        parts += [Text(m, style="dim") for m in self.messages]
        parts.append(Text("Ctrl-C: stop after this experiment (twice: abort it)", style="dim"))
        return Group(*parts)


def make_dashboard(console: Console, *, title: str, device: str, agent: str,
                   timing_note: str = "", live: bool | None = None) -> Dashboard:
    """The live view when the console is a terminal (or `live` says so), else log lines."""
    use_live = console.is_terminal if live is None else live
    if use_live:
        return LiveDashboard(console, title=title, device=device, agent=agent,
                             timing_note=timing_note)
    return PlainDashboard(stream=console.file)
