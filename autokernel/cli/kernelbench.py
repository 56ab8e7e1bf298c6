"""`autokernel kernelbench PATH...`: KernelBench-style problems, each profiled, optimized and
verified in its own workspace, with a table and KernelBench's fast_p over the set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from autokernel.cli._common import (DEVICE_OPTION, DTYPE_OPTION, PANEL_AGENT, PANEL_BUDGET,
                                    PANEL_OUTPUT, AgentChoice, Device, Dtype, console,
                                    err_console, fail, plain, progress_steps)
from autokernel.pipeline.options import EXIT_INTERRUPTED
from autokernel.text import count_of


def _problem_line(index: int, total: int, record: dict[str, Any]) -> str:
    """'[1/2] softmax_rows: done, PASS; device time 1.20× eager, ...' once a problem ends."""
    from autokernel.kernelbench.problem import INTERRUPTED
    from autokernel.kernelbench.table import optimized_cell, reason_cell, with_figures
    from autokernel.text import format_duration, format_ratio

    record = with_figures(record)
    took = format_duration(record.get("seconds") or 0)
    head = f"[{index + 1}/{total}] {record['problem']}"
    if record["status"] == INTERRUPTED:
        return f"{head}: interrupted (Ctrl-C) after {took}"
    parts = [record["status"]]
    if record["correctness"] != "–":
        parts.append(f"{record['correctness']}, device time "
                     f"{format_ratio(record['speedup_vs_eager'])} eager and "
                     f"{format_ratio(record['speedup_vs_compile'])} compile, wall "
                     f"{format_ratio(record['wall_speedup_vs_eager'])} eager")
    optimized = optimized_cell(record)
    if optimized != "–":
        parts.append(optimized)
    why = reason_cell(record)
    if why:
        parts.append(why)
    where = f" on {record['worker']}" if record.get("worker") else ""  # --gpus
    return f"{head}: {'; '.join(parts)} ({took}{where})"


class ProblemLines:
    """--gpus: problems run at once, so each phase change is a line of its own (no progress
    line, which follows one problem)."""

    def __init__(self, total: int, names: list[str], logs: Path, minutes: float) -> None:
        self.total, self.names, self.logs, self.minutes = total, names, logs, minutes
        self.phases: dict[int, str] = {}

    def start(self, index: int) -> None:
        from autokernel.kernelbench.progress import PROFILING

        self.phases[index] = PROFILING
        console.print(f"[{index + 1}/{self.total}] {self.names[index]}: {PROFILING}; its log: "
                      f"{self.logs / (self.names[index] + '.log')}", highlight=False,
                      soft_wrap=True)

    def update(self, index: int, phase: Any) -> None:
        from autokernel.kernelbench.progress import OPTIMIZING

        if phase.name != self.phases.get(index):
            self.phases[index] = phase.name
            budget = f" (up to {self.minutes:g} min)" if phase.name == OPTIMIZING else ""
            console.print(f"[{index + 1}/{self.total}] {self.names[index]}: {phase.name}{budget}",
                          highlight=False)

    def end(self) -> None:
        return None


class ProblemProgress:
    """Each problem's phase as it changes (a line each), and on a terminal a progress line
    with its latest step and the time it has taken."""

    def __init__(self, total: int, names: list[str], logs: Path, minutes: float,
                 device: str) -> None:
        self.total, self.names, self.logs, self.minutes = total, names, logs, minutes
        self.device = device
        self.phase: str | None = None
        self._steps: Any = None
        self._context: Any = None

    def _head(self, index: int) -> str:
        return f"[{index + 1}/{self.total}] {self.names[index]}"

    def start(self, index: int) -> None:
        from autokernel.kernelbench.progress import PROFILING

        self.phase = PROFILING
        log = self.logs / f"{self.names[index]}.log"
        console.print(f"{self._head(index)}: {PROFILING}; its log: {log}", highlight=False,
                      soft_wrap=True)
        self._context = progress_steps(f"{self._head(index)}: {PROFILING}")
        self._steps = self._context.__enter__()

    def update(self, index: int, phase: Any) -> None:
        from autokernel.kernelbench.progress import OPTIMIZING

        if phase.name != self.phase:
            self.phase = phase.name
            budget = f" (up to {self.minutes:g} min)" if phase.name == OPTIMIZING else ""
            console.print(f"{self._head(index)}: {phase.name}{budget}", highlight=False)
            if phase.name == OPTIMIZING and self.device == "cpu":
                self._say_cpu_estimate(index)
        if self._steps is not None:
            self._steps.step(f"{self._head(index)}: {phase.text()}")

    def _say_cpu_estimate(self, index: int) -> None:
        """On the CPU, what the problem's budget gets through in the interpreter, from the plan
        its workspace holds (nothing when it cannot be read)."""
        import json

        from autokernel.loop.cpu_estimate import estimate
        from autokernel.profiling.plan import Plan
        from autokernel.text import format_duration

        workspace = self.logs.parent / self.names[index]
        try:
            plan = Plan.load(workspace / "plan.json")
            run = json.loads((workspace / "run.json").read_text(encoding="utf-8"))
            night = estimate(plan, list(run["targets"]), self.minutes / 60.0,
                             float(run["config"]["bench_timeout_s"]))
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return
        warning = night.warning()
        text = (f"warning: {warning}" if warning else
                f"an experiment takes about {format_duration(night.mean_seconds)} in the Triton "
                f"interpreter: about {night.experiments:.0f} in {self.minutes:g} min")
        console.print(f"{self._head(index)}: {text}", highlight=False,
                      style="yellow" if warning else None)

    def end(self) -> None:
        if self._context is not None:
            self._context.__exit__(None, None, None)
            self._context = self._steps = None


def kernelbench(
    paths: list[Path] = typer.Argument(..., metavar="PATH", help="Problem files, or "
                                       "directories of them (their *.py files). KernelBench "
                                       "convention: class Model, get_inputs(), optional "
                                       "get_init_inputs()."),
    minutes_per_problem: float = typer.Option(15.0, "--minutes-per-problem",
                                              rich_help_panel=PANEL_BUDGET, help="Time "
                                              "budget of each problem's optimization loop "
                                              "(profiling and verify come on top)."),
    device: Device = DEVICE_OPTION,
    dtype: Dtype = DTYPE_OPTION,
    out: Path = typer.Option(None, "--out", rich_help_panel=PANEL_OUTPUT, help="The set's "
                             "directory (new): one workspace per problem, logs/, "
                             "results.md/.json/.tsv.",
                             show_default="./autokernel_runs/kernelbench-<timestamp>"),
    agent: AgentChoice = typer.Option(AgentChoice.auto, "--agent", rich_help_panel=PANEL_AGENT,
                                      help="tuner: offline search; claude: an LLM; auto: claude "
                                      "when ANTHROPIC_API_KEY is set, else tuner."),
    top: int = typer.Option(5, "--top", help="Optimize each problem's N highest-ranked "
                            "targets."),
    all_kernels: bool = typer.Option(False, "--all-kernels", help="Route every finished kernel "
                                     "in verify (by default only those that make the model "
                                     "faster, measured in it)."),
    claude_model: str = typer.Option(None, "--claude-model", rich_help_panel=PANEL_AGENT,
                                     help="Claude model id (claude agent)."),
    max_cost: float = typer.Option(None, "--max-cost", rich_help_panel=PANEL_AGENT,
                                   help="LLM spend cap in USD, per problem (claude agent)."),
    seed: int = typer.Option(0, "--seed", rich_help_panel=PANEL_AGENT,
                             help="Seed of the tuner's search."),
    resume: bool = typer.Option(False, "--resume", help="Continue the set in --out: a problem "
                                "with a result keeps it, the others run (an interrupted one "
                                "from the start)."),
    gpus: str = typer.Option(None, "--gpus", help="Run a problem on each of these GPUs at once: "
                             "all, a count, or indices (0,2,3); on --device cpu, that many "
                             "problems in the interpreter.", show_default="one at a time"),
) -> None:
    """Run KernelBench-style problems through profile → run → verify; table and fast_p."""
    from autokernel.kernelbench.suite import LOGS_DIR, SuiteInterrupted, hard_limit_s
    from autokernel.kernelbench.table import fast_p_rows, table_paths
    from autokernel.kernelbench.run_set import (KernelbenchOptions, prepare_kernelbench,
                                                run_kernelbench)
    from autokernel.pipeline import PipelineError, Progress

    options = KernelbenchOptions(
        paths=paths, minutes_per_problem=minutes_per_problem, device=plain(device),
        dtype=plain(dtype), out=out, agent=plain(agent) or "auto", top=top,
        all_kernels=all_kernels, claude_model=claude_model, max_cost=max_cost, seed=seed,
        resume=resume, gpus=gpus)
    try:
        kset = prepare_kernelbench(options, Progress(console, err_console))
    except PipelineError as exc:
        fail(str(exc), code=exc.code)
    out, total, device_name = kset.out, len(kset.problems), kset.template.device
    dtype_name = kset.template.dtype
    console.print(f"{count_of(total, 'problem')}, {dtype_name} on "
                  f"{kset.meta['gpu'] or device_name}, "
                  f"{minutes_per_problem:g} min each (hard limit "
                  f"{hard_limit_s(minutes_per_problem) / 60:.0f} min); {kset.agent_note}; "
                  f"out: {out}", highlight=False, soft_wrap=True)
    if resume:
        console.print(f"resuming: {len(kset.finished)} of {count_of(total, 'problem')} keep "
                      "their result", highlight=False)

    progress: Any = ProblemProgress(total, kset.names, out / LOGS_DIR, minutes_per_problem,
                                    device_name)
    if kset.slots is not None:
        console.print(f"{count_of(len(kset.slots), 'problem')} at a time, on "
                      f"{', '.join(s.label for s in kset.slots)}", highlight=False)
        progress = ProblemLines(total, kset.names, out / LOGS_DIR, minutes_per_problem)

    def on_record(index: int, record: dict[str, Any]) -> None:
        progress.end()
        earlier = " (from the earlier run)" if record.get("problem") in kset.finished else ""
        console.print(_problem_line(index, total, record) + earlier, highlight=False,
                      soft_wrap=True)

    try:
        records = run_kernelbench(kset, progress.start, progress.update, on_record)
    except (SuiteInterrupted, KeyboardInterrupt):
        progress.end()
        console.print(f"interrupted; the table so far is in {out / 'results.md'}; continue "
                      f"the set with the same command plus --out {out} --resume",
                      highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    console.print("fast_p (fraction of the problems correct with a device-time speedup > p):",
                  highlight=False)
    for baseline, *cells, measured in fast_p_rows(records):
        console.print(f"  vs {baseline}: fast_0 {cells[0]}, fast_1 {cells[1]}, fast_2 "
                      f"{cells[2]} ({measured} with a speedup)", highlight=False)
    console.print("table: " + ", ".join(str(p) for p in table_paths(out).values()),
                  highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("kernelbench")(kernelbench)
