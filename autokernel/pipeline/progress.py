"""How the pipeline talks while it works: lines, a progress line, the loop's dashboard, the
end-of-run summary. The CLI passes one on its terminal; a scheduler running several pipelines
side by side passes its own (a per-GPU log console, `live=False`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from autokernel.loop.dashboard import Dashboard
    from autokernel.loop.state import RunState
    from autokernel.loop.workspace import Workspace


class Steps:
    """A long step's progress line: a spinner, what is happening and the time it has taken, on
    a terminal; nothing at all elsewhere (a log or a pipe gets the commands' own lines)."""

    def __init__(self, progress: Any, task: Any) -> None:
        self._progress = progress
        self._task = task

    def step(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=text)


@contextmanager
def progress_steps(text: str, out: Console) -> Iterator[Steps]:
    """`with progress_steps("profiling model.py", console) as steps: ...; steps.step("ranking")`."""
    if not out.is_terminal:
        yield Steps(None, None)
        return
    from rich.progress import Progress as RichProgress
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    with RichProgress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=out, transient=True) as progress:
        yield Steps(progress, progress.add_task(text, total=None, start=True))


class Progress:
    """The pipeline's voice. `console` takes the user's lines (stdout), `err_console` the
    asides that must stay off stdout (it may be JSON); `live` picks the loop's dashboard (None:
    live when `console` is a terminal)."""

    def __init__(self, console: Console | None = None, err_console: Console | None = None,
                 live: bool | None = None) -> None:
        self.console = console if console is not None else Console()
        self.err_console = err_console if err_console is not None else Console(stderr=True)
        self.live = live

    def say(self, text: str, *, style: str | None = None, soft_wrap: bool = False) -> None:
        self.console.print(text, style=style, highlight=False, soft_wrap=soft_wrap)

    def aside(self, text: str) -> None:
        self.err_console.print(text, highlight=False)

    def steps(self, text: str) -> Any:
        """A context manager yielding `Steps` (a progress line on a terminal)."""
        return progress_steps(text, self.console)

    def dashboard(self, *, title: str, device: str, agent: str, timing_note: str,
                  history: Iterable[Any]) -> Dashboard:
        from autokernel.loop.dashboard import make_dashboard

        return make_dashboard(self.console, title=title, device=device, agent=agent,
                              timing_note=timing_note, live=self.live, history=history)

    def end_of_run(self, workspace: Workspace, state: RunState, reason: str,
                   llm_usage: str) -> None:
        from autokernel.loop.summary import print_end_of_run

        print_end_of_run(workspace, state, reason, self.console, llm_usage=llm_usage)
