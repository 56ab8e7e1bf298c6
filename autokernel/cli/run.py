"""`autokernel run MODEL.py` (the overnight loop) and `autokernel resume DIR`: the options
parsed into the pipeline's, the pipeline called (autokernel.pipeline), its outcome as an exit
status."""

from __future__ import annotations

from pathlib import Path

import typer

from autokernel.cli._common import (CLASS_NAME_OPTION, DEVICE_OPTION, DTYPE_OPTION,
                                    MODEL_FILE_ARGUMENT, PANEL_AGENT, PANEL_BUDGET, PANEL_HARNESS,
                                    PANEL_MOVE_ON, PANEL_OUTPUT, PANEL_SPEEDUP, AgentChoice,
                                    Backend, Device, Dtype, SpeedupBaseline, console,
                                    err_console, fail, plain)


def kernel_types(text: str | None) -> frozenset[str]:
    """`--only a,b` as a set of names (checked against the registry by the pipeline)."""
    return frozenset(t.strip() for t in (text or "").split(",") if t.strip())


GPUS_HELP = ("Judge experiments on several GPUs, one worker each: all, a count, or indices "
             "(0,2,3); targets run in parallel. On --device cpu, interpreter workers stand in "
             "for GPUs.")
RAY_HELP = ("Judge experiments on the GPUs of a Ray cluster (auto: the one this machine is part "
            "of; or its address); --gpus then counts the cluster's GPUs (default all). Needs "
            "the ray extra.")


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
    gpus: str = typer.Option(None, "--gpus", rich_help_panel=PANEL_HARNESS, help=GPUS_HELP,
                             show_default="one GPU, in this process"),
    ray: str = typer.Option(None, "--ray", rich_help_panel=PANEL_HARNESS, help=RAY_HELP),
) -> None:
    """Profile MODEL.py, then optimize its top kernels overnight in a workspace git repo."""
    from autokernel.pipeline import PipelineError, Progress, RunOptions, run_pipeline

    options = RunOptions(
        model_file=model_file, device=plain(device), dtype=plain(dtype), class_name=class_name,
        top=top, only=kernel_types(only), skip=kernel_types(skip), rank_by=rank_by,
        plan_file=plan_file, hours=hours, kernel_minutes=kernel_minutes,
        max_consecutive_reverts=max_consecutive_reverts, peak_fraction=peak_fraction,
        target_speedup=target_speedup, speedup_baseline=plain(speedup_baseline) or "best",
        max_experiments_per_target=max_experiments_per_target, min_gain=min_gain,
        screen=screen, bench_timeout=bench_timeout, check_all_dtypes=check_all_dtypes,
        agent=plain(agent) or "auto", seed=seed, claude_model=claude_model, max_cost=max_cost,
        max_llm_calls=max_llm_calls, drafts=drafts, backend=plain(backend) or "triton", out=out,
        yes=yes, gpus=gpus, ray=ray,
    )
    try:
        outcome = run_pipeline(options, Progress(console, err_console, live))
    except PipelineError as exc:
        fail(str(exc), code=exc.code)
    if outcome.exit_status:
        raise typer.Exit(outcome.exit_status)


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
    gpus: str = typer.Option(None, "--gpus", rich_help_panel=PANEL_HARNESS, help=GPUS_HELP,
                             show_default="the run's own"),
    ray: str = typer.Option(None, "--ray", rich_help_panel=PANEL_HARNESS, help=RAY_HELP,
                            show_default="the run's own"),
) -> None:
    """Continue an interrupted (or extend a finished) run from where it stopped."""
    from autokernel.pipeline import PipelineError, Progress, ResumeOptions, resume_pipeline

    options = ResumeOptions(directory=directory, hours=hours, agent=plain(agent),
                            max_cost=max_cost, max_llm_calls=max_llm_calls, gpus=gpus, ray=ray)
    try:
        outcome = resume_pipeline(options, Progress(console, err_console, live))
    except PipelineError as exc:
        fail(str(exc), code=exc.code)
    if outcome.exit_status:
        raise typer.Exit(outcome.exit_status)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("resume")(resume)
