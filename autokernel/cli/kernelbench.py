"""`autokernel kernelbench PATH...`: KernelBench-style problems, each profiled, optimized and
verified in its own workspace, with a table and KernelBench's fast_p over the set."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import typer

from autokernel.cli._common import (DEVICE_OPTION, DTYPE_OPTION, PANEL_AGENT, PANEL_BUDGET,
                                    PANEL_OUTPUT, AgentChoice, Device, Dtype, console,
                                    device_or_fail, fail, plain, progress_steps)
from autokernel.text import count_of

DEFAULT_RUNS_DIR = Path("autokernel_runs")
EXIT_INTERRUPTED = 130


def _check_out_dir(out: Path) -> None:
    from autokernel.loop.workspace import WorkspaceError, check_new_workspace_dir

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"{out} already exists and is not empty; kernelbench needs a new --out DIR")
    try:
        check_new_workspace_dir(out)  # the rule about other people's git work trees
    except WorkspaceError as exc:
        fail(str(exc))


# A table mixes no GPUs, dtypes or budgets.
RESUMED_SETTINGS = ("device", "gpu", "dtype", "minutes_per_problem", "agent")


def _resumed_meta(out: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """The set's first meta with this run's start appended; refuses a set run differently."""
    import json

    try:
        earlier = json.loads((out / "results.json").read_text(encoding="utf-8"))["meta"]
    except (OSError, ValueError, KeyError, TypeError):
        fail(f"{out} is not a kernelbench set (no readable results.json); --resume continues "
             "a set that `autokernel kernelbench --out DIR` started")
    for key in RESUMED_SETTINGS:
        if earlier.get(key) != meta[key]:
            fail(f"{out} was run with {key} {earlier.get(key)!r}, not {meta[key]!r}; resume it "
                 "with the same settings")
    resumed = {**meta, **earlier, "resumed": [*earlier.get("resumed", []), meta["created"]]}
    resumed["commit"] = meta["commit"] if meta["commit"] == earlier.get("commit") else (
        f"{earlier.get('commit')}, resumed at {meta['commit']}")
    return resumed


def _meta(device: str, dtype: str, minutes: float, agent: str) -> dict[str, Any]:
    import torch

    import autokernel
    from autokernel.versions import software_versions, source_commit

    return {
        "device": device, "dtype": dtype, "minutes_per_problem": minutes, "agent": agent,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "commit": source_commit(Path(autokernel.__file__).resolve().parents[1]),
        "versions": software_versions(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(sys.argv),
    }


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
    return f"{head}: {'; '.join(parts)} ({took})"


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
) -> None:
    """Run KernelBench-style problems through profile → run → verify; table and fast_p."""
    from autokernel.kernelbench.suite import SuiteError, discover_problems

    device, dtype, agent = plain(device), plain(dtype), plain(agent)
    if minutes_per_problem <= 0:
        fail(f"--minutes-per-problem must be positive; got {minutes_per_problem:g}")
    if top < 1:
        fail("--top must be at least 1")
    try:
        problems = discover_problems(paths)
    except SuiteError as exc:
        fail(str(exc))
    resolved_device = device_or_fail(device)
    dtype = dtype or ("fp16" if resolved_device == "cuda" else "fp32")

    from autokernel.agents import AgentUnavailable, make_agent, resolve_agent_name

    agent_options = {k: v for k, v in (("seed", seed), ("model", claude_model),
                                       ("max_cost", max_cost)) if v is not None}
    try:
        agent_name, agent_note = resolve_agent_name(agent)
        make_agent(agent, **agent_options)  # refuse now, not once per problem
    except AgentUnavailable as exc:
        fail(str(exc))
    if resume and out is None:
        fail("--resume needs --out DIR, the set to continue")
    out = out if out is not None else DEFAULT_RUNS_DIR / time.strftime("kernelbench-%Y%m%d-%H%M%S")
    if not resume:
        _check_out_dir(out)
    out.mkdir(parents=True, exist_ok=True)

    from autokernel.kernelbench.problem import ProblemJob
    from autokernel.kernelbench.suite import (
        LOGS_DIR, SuiteInterrupted, finished_records, hard_limit_s, problem_names, run_suite,
    )
    from autokernel.kernelbench.table import fast_p_rows, write_tables

    meta = _meta(resolved_device, dtype, minutes_per_problem, agent_name)
    finished: dict[str, dict[str, Any]] = {}
    if resume:
        meta = _resumed_meta(out, meta)
        finished = finished_records(out, problem_names(problems))
    template = ProblemJob(problem="", workspace="", result_path="", device=resolved_device,
                          dtype=dtype, minutes=minutes_per_problem, agent=agent_name,
                          agent_options=agent_options, top=top, all_kernels=all_kernels)
    console.print(f"{count_of(len(problems), 'problem')}, {dtype} on "
                  f"{meta['gpu'] or resolved_device}, "
                  f"{minutes_per_problem:g} min each (hard limit "
                  f"{hard_limit_s(minutes_per_problem) / 60:.0f} min); {agent_note}; "
                  f"out: {out}", highlight=False, soft_wrap=True)
    if resume:
        console.print(f"resuming: {len(finished)} of {count_of(len(problems), 'problem')} keep "
                      "their result", highlight=False)

    names = problem_names(problems)
    progress = ProblemProgress(len(problems), names, out / LOGS_DIR, minutes_per_problem,
                               resolved_device)

    def on_record(index: int, record: dict[str, Any], records: list[dict[str, Any]]) -> None:
        progress.end()
        earlier = " (from the earlier run)" if record.get("problem") in finished else ""
        console.print(_problem_line(index, len(problems), record) + earlier, highlight=False,
                      soft_wrap=True)
        write_tables(out, records, meta, names)

    try:
        records = run_suite(problems, out, template, on_record,
                            lambda index, path: progress.start(index), finished,
                            on_phase=progress.update)
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
    paths_written = write_tables(out, records, meta, names)
    console.print("table: " + ", ".join(str(p) for p in paths_written.values()),
                  highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("kernelbench")(kernelbench)
