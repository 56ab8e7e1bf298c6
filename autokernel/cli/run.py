"""`autokernel run MODEL.py` (the overnight loop) and `autokernel resume DIR`."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from autokernel.cli._common import (CLASS_NAME_OPTION, DEVICE_OPTION, DTYPE_OPTION,
                                    MODEL_FILE_ARGUMENT, PANEL_AGENT, PANEL_BUDGET, PANEL_HARNESS,
                                    PANEL_MOVE_ON, PANEL_OUTPUT, PANEL_SPEEDUP, AgentChoice,
                                    Backend, Device, Dtype, SpeedupBaseline, console,
                                    device_or_fail, fail, plain, progress_steps)
from autokernel.text import error_summary
from autokernel.versions import software_versions

if TYPE_CHECKING:
    from autokernel.loop.config import LoopConfig
    from autokernel.loop.state import RunState
    from autokernel.profiling.plan import Plan

DEFAULT_RUNS_DIR = Path("autokernel_runs")
EXIT_INTERRUPTED = 130


def _split_types(text: str | None, option: str) -> set[str]:
    from autokernel.ops import KERNEL_TYPES

    if not text:
        return set()
    names = {t.strip() for t in text.split(",") if t.strip()}
    unknown = sorted(names - set(KERNEL_TYPES))
    if unknown:
        fail(f"{option}: unknown kernel type {', '.join(unknown)}; "
             f"known: {', '.join(KERNEL_TYPES)}")
    return names


def _positive(value: float | None, option: str, *, allow_zero: bool = False) -> None:
    if value is not None and (value < 0 or (value == 0 and not allow_zero)):
        fail(f"{option} must be {'0 or more' if allow_zero else 'positive'}; got {value:g}")


def _profile_plan(model_file: Path, class_name: str, dtype: str, device: str,
                  rank_by: str = "eager") -> Plan:
    from autokernel.profiling.model_loader import ModelLoadError, load_model_file
    from autokernel.profiling.session import profile_plan

    try:
        loaded = load_model_file(model_file, class_name=class_name, dtype=dtype, device=device)
    except ModelLoadError as exc:
        fail(str(exc))
    console.print(f"profiling {model_file} on {device} ({dtype})", highlight=False)
    with progress_steps(f"profiling {model_file}: warm-up and profiled forwards") as steps:
        try:
            record, plan = profile_plan(
                loaded, model=str(model_file), class_name=class_name, rank_by=rank_by,
                progress=lambda what: steps.step(f"profiling {model_file}: {what}"))
        except KeyboardInterrupt:
            fail("interrupted while profiling; no workspace was created", code=EXIT_INTERRUPTED)
        except Exception as exc:  # the forward ran once already: the machine's trouble, not input
            fail(f"profiling {model_file} failed: {error_summary(exc)}", code=1)
    del loaded, record
    _release_device_memory()
    return plan


def _release_device_memory() -> None:
    """Give back what profiling left in this process's CUDA cache: the harness workers that
    follow allocate on the same GPU, and a huge model's cached blocks would crowd them out."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _load_plan_file(path: Path) -> Plan:
    import json

    from autokernel.profiling.plan import Plan

    try:
        return Plan.load(path)
    except (OSError, ValueError, TypeError, KeyError, json.JSONDecodeError) as exc:
        fail(f"cannot read the plan {path}: {exc}")


def _select_targets(plan: Plan, top: int, only: set[str], skip: set[str]) -> list[int]:
    chosen = [
        i for i, t in enumerate(plan.targets)
        if (not only or t.kernel_type in only) and t.kernel_type not in skip
    ]
    return chosen[:top]


def _make_agent_or_fail(name: str, options: dict[str, Any],
                        saved_options: dict[str, Any] | None = None) -> tuple[Any, str, str]:
    from autokernel.agents import AGENT_OPTIONS, AgentUnavailable, make_agent, resolve_agent_name

    try:
        resolved, note = resolve_agent_name(name)
        # A run resumed with another agent leaves behind the saved options only the first took.
        kept = {k: v for k, v in (saved_options or {}).items() if k in AGENT_OPTIONS[resolved]}
        agent = make_agent(name, **{**kept, **options})
    except AgentUnavailable as exc:
        fail(str(exc))
    return agent, resolved, note


def _drive(workspace: Any, plan: Plan, state: RunState, config: LoopConfig, agent: Any,
           agent_note: str, live: bool | None, new_hours: float | None = None) -> None:
    """Run the loop with a dashboard, print the summary, exit with the run's status."""
    from autokernel.loop.dashboard import make_dashboard, status_text
    from autokernel.loop.config import CPU_LOOP_NOTE
    from autokernel.loop.journal import RunInconsistent
    from autokernel.loop.results import read_rows
    from autokernel.loop.runner import Runner
    from autokernel.loop.summary import print_end_of_run
    from autokernel.loop.workspace import WorkspaceError

    console.print(f"workspace: {workspace.root}", highlight=False)
    console.print(agent_note, highlight=False)
    for target in state.targets:
        planned = plan.targets[target.index]
        shape = "x".join(str(d) for d in planned.bench_shape)
        console.print(f"  {target.tag}: {planned.share:.1%} of the model's time, "
                      f"{shape} {planned.dtype}, {status_text(target.status)}", highlight=False)
    dashboard = make_dashboard(
        console, title=f"autokernel {state.run_tag}", device=config.device, agent=config.agent,
        timing_note=CPU_LOOP_NOTE if config.device == "cpu" else "", live=live,
        history=read_rows(workspace.results_path),
    )
    runner = Runner(workspace, plan, state, config, agent, dashboard=dashboard)
    if new_hours is not None:
        runner.extend_hours(new_hours)
    try:
        reason = runner.run()
    except (WorkspaceError, RunInconsistent) as exc:
        fail(str(exc), code=1)
    spend = getattr(agent, "total", None)  # an LLM agent's usage over the whole run
    usage = spend.describe() if spend is not None and getattr(spend, "calls", 0) else ""
    print_end_of_run(workspace, state, reason, console, llm_usage=usage)
    if not state.finished:
        raise typer.Exit(EXIT_INTERRUPTED)


def run(
    model_file: Path = MODEL_FILE_ARGUMENT,
    device: Device = DEVICE_OPTION,
    dtype: Dtype = DTYPE_OPTION,
    class_name: str = CLASS_NAME_OPTION,
    top: int = typer.Option(5, "--top", help="Optimize the N highest-ranked targets."),
    only: str = typer.Option(None, "--only", help="Comma-separated kernel types to optimize "
                             "(others are skipped)."),
    skip: str = typer.Option(None, "--skip", help="Comma-separated kernel types to leave alone."),
    rank_by: str = typer.Option("eager", "--rank-by", help="Rank the targets by their share of "
                                "the eager forward (eager) or of the torch.compile'd one "
                                "(compile: for a model you will run compiled)."),
    plan_file: Path = typer.Option(None, "--plan", help="Use this plan (from `autokernel "
                                   "profile --json`) instead of profiling again."),
    hours: float = typer.Option(8.0, "--hours", rich_help_panel=PANEL_BUDGET, help="Time "
                                "budget of the whole run (active time, kept across resume)."),
    kernel_minutes: float = typer.Option(120.0, "--kernel-minutes", rich_help_panel=PANEL_BUDGET,
                                         help="Most time spent on one target, on its own "
                                         "clock."),
    max_consecutive_reverts: int = typer.Option(5, "--max-consecutive-reverts",
                                                rich_help_panel=PANEL_MOVE_ON, help="Move on "
                                                "after this many phase=search experiments in a "
                                                "row not kept; the tuner's explore samples do "
                                                "not count (0: never)."),
    peak_fraction: float = typer.Option(0.9, "--peak-fraction", rich_help_panel=PANEL_MOVE_ON,
                                        help="Move on at this fraction of the GPU's roofline "
                                        "(0: never; off on cpu)."),
    target_speedup: float = typer.Option(2.0, "--target-speedup", rich_help_panel=PANEL_SPEEDUP,
                                         help="Move on at this speedup over PyTorch (0: "
                                         "never)."),
    speedup_baseline: SpeedupBaseline = typer.Option(
        SpeedupBaseline.best, "--speedup-baseline", rich_help_panel=PANEL_SPEEDUP,
        help="PyTorch baseline of --target-speedup: best is the faster of eager and "
             "torch.compile."),
    max_experiments_per_target: int = typer.Option(None, "--max-experiments-per-target",
                                                   rich_help_panel=PANEL_MOVE_ON,
                                                   help="Move on after N experiments."),
    min_gain: float = typer.Option(0.01, "--min-gain", rich_help_panel=PANEL_HARNESS,
                                   help="Keep a candidate when the 95% lower bound of its "
                                   "speedup over the best, timed in the same rounds, exceeds "
                                   "1 + this."),
    screen: bool = typer.Option(True, "--screen/--no-screen", rich_help_panel=PANEL_HARNESS,
                                help="Judge each candidate with the quick shape sweep first, "
                                "and the full sweep only when it would be kept (every "
                                "detector runs either way)."),
    bench_timeout: float = typer.Option(None, "--bench-timeout", rich_help_panel=PANEL_HARNESS,
                                        help="Seconds before a candidate counts as hung.",
                                        show_default="60 on cuda, 300 on cpu"),
    check_all_dtypes: bool = typer.Option(False, "--check-all-dtypes",
                                          rich_help_panel=PANEL_HARNESS, help="Check every "
                                          "candidate in fp16, bf16 and fp32, not only the "
                                          "model's dtype (slower)."),
    agent: AgentChoice = typer.Option(AgentChoice.auto, "--agent", rich_help_panel=PANEL_AGENT,
                                      help="tuner: offline search; claude: an LLM; auto: claude "
                                      "when ANTHROPIC_API_KEY is set, else tuner."),
    seed: int = typer.Option(0, "--seed", rich_help_panel=PANEL_AGENT,
                             help="Seed of the tuner's search."),
    claude_model: str = typer.Option(None, "--claude-model", rich_help_panel=PANEL_AGENT,
                                     help="Claude model id (claude agent; also "
                                     "AUTOKERNEL_CLAUDE_MODEL)."),
    max_cost: float = typer.Option(None, "--max-cost", rich_help_panel=PANEL_AGENT,
                                   help="Stop when the LLM spend reaches this many USD (claude "
                                   "agent)."),
    max_llm_calls: int = typer.Option(None, "--max-llm-calls", rich_help_panel=PANEL_AGENT,
                                      help="Stop after this many LLM requests (claude agent)."),
    drafts: int = typer.Option(1, "--drafts", rich_help_panel=PANEL_AGENT,
                               help="Conversations per round, each editing a parent picked on "
                               "the target's frontier, each judged as its own experiment "
                               "(claude agent)."),
    backend: Backend = typer.Option(Backend.triton, "--backend", rich_help_panel=PANEL_AGENT,
                                    help="Starters: triton; cuda (CUDA C++ where the type has "
                                    "one; needs a GPU); auto (Triton, then the CUDA starter, "
                                    "kept where it is faster)."),
    out: Path = typer.Option(None, "--out", rich_help_panel=PANEL_OUTPUT,
                             help="Workspace directory (new).",
                             show_default="./autokernel_runs/<model>-<timestamp>"),
    live: bool = typer.Option(None, "--live/--no-live", rich_help_panel=PANEL_OUTPUT,
                              help="Live dashboard, or plain log lines.",
                              show_default="live when stdout is a terminal"),
    yes: bool = typer.Option(False, "--yes", help="Start even when, on the CPU, the model is "
                             "too large for the night to finish a handful of experiments."),
) -> None:
    """Profile MODEL.py, then optimize its top kernels overnight in a workspace git repo."""
    device, dtype, agent = plain(device), plain(dtype), plain(agent)
    speedup_baseline, backend = plain(speedup_baseline), plain(backend)
    if not model_file.is_file():
        fail(f"model file not found: {model_file}")
    if rank_by not in ("eager", "compile"):
        fail(f"--rank-by must be eager or compile, not {rank_by!r}")
    _positive(hours, "--hours")
    _positive(kernel_minutes, "--kernel-minutes")
    _positive(bench_timeout, "--bench-timeout")
    _positive(max_consecutive_reverts, "--max-consecutive-reverts", allow_zero=True)
    _positive(target_speedup, "--target-speedup", allow_zero=True)
    _positive(max_experiments_per_target, "--max-experiments-per-target")
    _positive(min_gain, "--min-gain", allow_zero=True)
    if drafts < 1:
        fail(f"--drafts must be at least 1; got {drafts}")
    if top < 1:
        fail("--top must be at least 1")
    if not 0 <= peak_fraction <= 1:
        fail(f"--peak-fraction must be between 0 and 1; got {peak_fraction:g}")
    from autokernel.orchestrate import MoveOnConfig

    only_types, skip_types = _split_types(only, "--only"), _split_types(skip, "--skip")
    if plan_file is not None and not plan_file.is_file():
        fail(f"plan file not found: {plan_file}")

    resolved_device = device_or_fail(device)
    if backend == "cuda" and resolved_device != "cuda":
        fail("--backend cuda needs a GPU: CUDA C++ kernels cannot run on --device cpu (use "
             "--backend triton, or auto, which is Triton there)")
    dtype = dtype or ("fp16" if resolved_device == "cuda" else "fp32")
    # Only the options the user gave: the agent refuses one it cannot use (--max-cost to the tuner).
    agent_options = {k: v for k, v in (("seed", seed), ("model", claude_model),
                                       ("max_cost", max_cost), ("max_llm_calls", max_llm_calls),
                                       ("drafts", drafts if drafts != 1 else None))
                     if v is not None}
    agent_impl, agent_name, agent_note = _make_agent_or_fail(agent, agent_options)

    from autokernel.loop.workspace import WorkspaceError, check_new_workspace_dir, run_tag_for

    run_tag = run_tag_for(model_file, time.strftime("%Y%m%d-%H%M%S"))
    root = out if out is not None else DEFAULT_RUNS_DIR / run_tag
    try:
        check_new_workspace_dir(root)
    except WorkspaceError as exc:
        fail(str(exc))

    if plan_file is not None:
        plan = _load_plan_file(plan_file)
        if plan.device != resolved_device:
            console.print(f"[yellow]note: the plan was profiled on {plan.device}, the run uses "
                          f"{resolved_device}[/]")
    else:
        plan = _profile_plan(model_file, class_name, dtype, resolved_device, plain(rank_by))
    chosen = _select_targets(plan, top, only_types, skip_types)
    if not chosen:
        why = plan.message or "no target is left after --only/--skip"
        fail(f"nothing to optimize in {model_file}: {why}", code=1)

    from autokernel.loop.config import LoopConfig

    config = LoopConfig(
        device=resolved_device,
        dtype=dtype,
        agent=agent_name,
        hours=hours,
        move_on=MoveOnConfig(
            max_consecutive_reverts=max_consecutive_reverts or None,
            peak_fraction=peak_fraction or None,
            target_seconds=kernel_minutes * 60.0,
            target_speedup=target_speedup or None,
            speedup_baseline=speedup_baseline,
            max_experiments=max_experiments_per_target,
        ),
        bench_timeout_s=bench_timeout or (60.0 if resolved_device == "cuda" else 300.0),
        # The interpreter is ~1000x slower than a GPU: the harness's smaller sweep keeps a cpu
        # run (CI's end-to-end test) in minutes; every detector still runs.
        harness_quick=resolved_device == "cpu",
        check_all_dtypes=check_all_dtypes,
        min_keep_margin=min_gain,
        screen=screen,
        seed=seed,
        backend=backend,
    )
    if resolved_device == "cpu":
        _check_cpu_night(plan, chosen, config, yes)
    workspace, state = create_workspace(root, run_tag, model_file, class_name, plan, chosen,
                                         config, agent_options)
    _drive(workspace, plan, state, config, agent_impl, agent_note, live)


def _check_cpu_night(plan: Plan, chosen: list[int], config: LoopConfig, yes: bool) -> None:
    """Say what a CPU night will get through; refuse, unless --yes, one that would finish fewer
    than a handful of experiments (a GPU-sized model in the Triton interpreter)."""
    from autokernel.loop.cpu_estimate import estimate
    from autokernel.text import format_duration

    night = estimate(plan, chosen, config.hours, config.bench_timeout_s)
    warning = night.warning()
    if not warning:
        console.print(f"on the CPU an experiment takes about "
                      f"{format_duration(night.mean_seconds)} in the Triton interpreter: about "
                      f"{night.experiments:.0f} in {config.hours:g} h", highlight=False)
        return
    if not yes:
        fail(f"{warning}; run it on a GPU, try a smaller model such as "
             "examples/models/tiny_llama.py, or pass --yes to start anyway")
    console.print(f"[yellow]warning: {warning}; starting anyway (--yes)[/]", highlight=False)


def create_workspace(root: Path, run_tag: str, model_file: Path, class_name: str, plan: Plan,
                      chosen: list[int], config: LoopConfig,
                      agent_options: dict[str, Any]) -> tuple[Any, RunState]:
    """A new run's workspace under `root` (git repository, model copy, program.md, reference.py,
    plan.json, run.json, results.tsv) and its first state, for `run` and `kernelbench`."""
    import json

    from autokernel import reference
    from autokernel.agents import PROGRAM_PATH
    from autokernel.loop.results import ResultsLog
    from autokernel.loop.state import RunState, TargetState
    from autokernel.loop.workspace import BRANCH_PREFIX, Workspace, WorkspaceError

    run_info = {
        "run_tag": run_tag,
        "model": str(model_file),
        "model_copy": f"model/{model_file.name}",
        "class_name": class_name,
        "targets": chosen,
        "config": config.to_dict(),
        "agent_options": {k: v for k, v in agent_options.items() if v is not None},
        "versions": software_versions(),
        "gpu": plan.gpu,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(sys.argv),
    }
    try:
        workspace = Workspace.create(
            root,
            run_tag=run_tag,
            run_info=run_info,
            plan_json=json.dumps(plan.to_dict(), indent=2) + "\n",
            model_path=model_file,
            program_md=PROGRAM_PATH.read_text(encoding="utf-8"),
            reference_source=Path(reference.__file__).read_text(encoding="utf-8"),
        )
    except WorkspaceError as exc:
        fail(str(exc))
    targets = [
        TargetState(index=i, rank=plan.targets[i].rank, kernel_type=plan.targets[i].kernel_type,
                    tag=f"{plan.targets[i].rank:02d}_{plan.targets[i].kernel_type}")
        for i in chosen
    ]
    state = RunState(run_tag=run_tag, branch=BRANCH_PREFIX + run_tag, head=workspace.head(),
                     targets=targets, hours=config.hours)
    ResultsLog.create(workspace.results_path)
    state.save(workspace.state_path)
    return workspace, state


def resume(
    directory: Path = typer.Argument(..., metavar="DIR", help="The run's workspace directory."),
    hours: float = typer.Option(None, "--hours", rich_help_panel=PANEL_BUDGET, help="New time "
                                "budget of the whole run (active time since it started), e.g. "
                                "to extend a finished run.", show_default="the run's own"),
    agent: AgentChoice = typer.Option(None, "--agent", rich_help_panel=PANEL_AGENT,
                                      help="Switch agent.", show_default="the run's own"),
    max_cost: float = typer.Option(None, "--max-cost", rich_help_panel=PANEL_AGENT,
                                   help="New LLM spend cap in USD."),
    max_llm_calls: int = typer.Option(None, "--max-llm-calls", rich_help_panel=PANEL_AGENT,
                                      help="New LLM request cap."),
    live: bool = typer.Option(None, "--live/--no-live", rich_help_panel=PANEL_OUTPUT,
                              help="Live dashboard, or plain log lines.",
                              show_default="live when stdout is a terminal"),
) -> None:
    """Continue an interrupted (or extend a finished) run from where it stopped."""
    agent = plain(agent)
    _positive(hours, "--hours")
    from autokernel.loop.config import LoopConfig
    from autokernel.loop.state import RunState
    from autokernel.loop.workspace import Workspace, WorkspaceError
    from autokernel.profiling.plan import Plan

    try:
        workspace = Workspace.open(directory)
        run_info = workspace.read_run()
        config = LoopConfig.from_dict(run_info["config"])
        state = RunState.load(workspace.state_path)
        plan = Plan.load(workspace.plan_path)
    except WorkspaceError as exc:
        fail(str(exc))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        fail(f"{directory} is not a readable autokernel run: {exc}")

    _check_resumable(directory, state, hours, given=(agent, max_cost, max_llm_calls))
    resolved_device = device_or_fail(config.device)
    config.device = resolved_device
    options = {k: v for k, v in (("max_cost", max_cost), ("max_llm_calls", max_llm_calls))
               if v is not None}
    agent_impl, agent_name, agent_note = _make_agent_or_fail(
        agent or config.agent, options, saved_options=run_info.get("agent_options", {}))
    config.agent = agent_name
    state.finished = False
    state.sessions += 1
    _drive(workspace, plan, state, config, agent_impl, agent_note, live, new_hours=hours)


def _check_resumable(directory: Path, state: RunState, hours: float | None,
                     given: tuple[Any, ...]) -> None:
    """A finished run resumed with nothing new would stop at once: say how to give it more
    time instead (exit 0). A new --hours must exceed the time the run has used."""
    from autokernel.loop.summary import more_hours
    from autokernel.text import format_duration

    used = format_duration(state.run_seconds)
    if hours is not None and hours * 3600.0 <= state.run_seconds:
        fail(f"--hours {hours:g} is not more than the {used} this run has used already; give "
             "it more")
    if not state.finished or hours is not None or any(v is not None for v in given):
        return
    budget = f"{state.hours:g} h" if state.hours else "no limit"
    console.print(f"{directory} is finished ({state.stop_reason or 'every target is done'}); "
                  f"it used {used} of {budget}. To give it more time:", highlight=False)
    console.print(f"  autokernel resume {directory} --hours "
                  f"{more_hours(state.hours or state.run_seconds / 3600.0)}",
                  highlight=False, soft_wrap=True)
    raise typer.Exit(0)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("resume")(resume)
