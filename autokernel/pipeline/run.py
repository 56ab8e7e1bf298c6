"""A run from start to end: profile → plan → workspace → loop → end-of-run report, and the
resume of one. `run_pipeline` and `resume_pipeline` are what `autokernel run` and `autokernel
resume` call; a scheduler calls them the same way, with its own `Progress`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autokernel.pipeline.options import (DEFAULT_RUNS_DIR, EXIT_INTERRUPTED, RUN_FAILED,
                                         PipelineError, ResumeOptions, RunOptions)
from autokernel.pipeline.progress import Progress
from autokernel.pipeline.stages import (check_cpu_night, create_workspace, load_plan_file,
                                        loop_config, make_run_agent, profile_model,
                                        resolve_device, select_targets)

if TYPE_CHECKING:
    from autokernel.loop.config import LoopConfig
    from autokernel.loop.state import RunState
    from autokernel.loop.workspace import Workspace
    from autokernel.profiling.plan import Plan


@dataclass
class RunOutcome:
    """Where a run (or a resume) ended. `finished`: every target is done or the budget is
    spent; False when it was interrupted and can be resumed. `reason`: why it stopped ("" when
    a resume had nothing to do)."""

    workspace: Workspace | None
    state: RunState
    reason: str

    @property
    def finished(self) -> bool:
        return self.state.finished

    @property
    def exit_status(self) -> int:
        """0 once finished, else 130 (interrupted: `autokernel resume` continues it)."""
        return 0 if self.finished else EXIT_INTERRUPTED


def run_pipeline(options: RunOptions, progress: Progress | None = None) -> RunOutcome:
    """Profile `options.model_file` (or read `options.plan_file`), pick its targets, create the
    workspace and run the loop to its end. PipelineError when refused or failed."""
    progress = progress if progress is not None else Progress()
    options.check()
    device = resolve_device(options.device, progress)
    if options.backend == "cuda" and device != "cuda":
        raise PipelineError("--backend cuda needs a GPU: CUDA C++ kernels cannot run on --device "
                            "cpu (use --backend triton, or auto, which is Triton there)")
    dtype = options.dtype or ("fp16" if device == "cuda" else "fp32")
    check_run_workers(options.gpus, options.ray, device)
    agent_options = options.agent_options()
    agent, agent_name, agent_note = make_run_agent(options.agent, agent_options)

    from autokernel.loop.workspace import WorkspaceError, check_new_workspace_dir, run_tag_for

    run_tag = run_tag_for(options.model_file, time.strftime("%Y%m%d-%H%M%S"))
    root = options.out if options.out is not None else DEFAULT_RUNS_DIR / run_tag
    try:
        check_new_workspace_dir(root)
    except WorkspaceError as exc:
        raise PipelineError(str(exc)) from None

    if options.plan_file is not None:
        plan = load_plan_file(options.plan_file)
        if plan.device != device:
            progress.say(f"note: the plan was profiled on {plan.device}, the run uses {device}",
                         style="yellow")
    else:
        plan = profile_model(options.model_file, options.class_name, dtype, device, progress,
                             options.rank_by)
    chosen = select_targets(plan, options.top, options.only, options.skip)
    if not chosen:
        why = plan.message or "no target is left after --only/--skip"
        raise PipelineError(f"nothing to optimize in {options.model_file}: {why}",
                            code=RUN_FAILED)
    config = loop_config(options, device, dtype, agent_name)
    if device == "cpu":
        check_cpu_night(plan, chosen, config, options.yes, progress)
    try:
        workspace, state = create_workspace(root, run_tag, options.model_file,
                                            options.class_name, plan, chosen, config,
                                            agent_options)
    except KeyboardInterrupt:  # before the loop's own Ctrl-C handling: said, not a traceback
        made = f" ({root} may be incomplete: remove it)" if root.exists() else ""
        raise PipelineError(f"interrupted before the first experiment{made}",
                            code=EXIT_INTERRUPTED) from None
    return drive(workspace, plan, state, config, agent, agent_note, progress,
                 make_agent=lambda: make_run_agent(options.agent, agent_options)[0])


def resume_pipeline(options: ResumeOptions, progress: Progress | None = None) -> RunOutcome:
    """Continue an interrupted run, or extend a finished one, from its workspace. A finished
    run given nothing new is not run: the outcome says so (reason "") after saying how to give
    it more time."""
    progress = progress if progress is not None else Progress()
    options.check()
    from autokernel.loop.config import LoopConfig
    from autokernel.loop.state import RunState
    from autokernel.loop.workspace import Workspace, WorkspaceError
    from autokernel.profiling.plan import Plan

    try:
        workspace = Workspace.open(options.directory)
        run_info = workspace.read_run()
        config = LoopConfig.from_dict(run_info["config"])
        state = RunState.load(workspace.state_path)
        plan = Plan.load(workspace.plan_path)
    except WorkspaceError as exc:
        raise PipelineError(str(exc)) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PipelineError(f"{options.directory} is not a readable autokernel run: "
                            f"{exc}") from None

    if not _resumable(options, state, progress):
        return RunOutcome(workspace=workspace, state=state, reason="")
    config.device = resolve_device(config.device, progress)
    if options.gpus is not None or options.ray is not None:  # else the run's own workers
        config.gpus = options.gpus if options.gpus is not None else config.gpus or "all"
        config.ray = options.ray if options.ray is not None else config.ray
    check_run_workers(config.gpus, config.ray, config.device)

    def agent_like_this() -> Any:
        return make_run_agent(options.agent or config.agent, options.agent_options(),
                              saved_options=run_info.get("agent_options", {}))[0]

    agent, agent_name, agent_note = make_run_agent(
        options.agent or config.agent, options.agent_options(),
        saved_options=run_info.get("agent_options", {}))
    config.agent = agent_name
    state.finished = False
    state.sessions += 1
    return drive(workspace, plan, state, config, agent, agent_note, progress,
                 new_hours=options.hours, make_agent=agent_like_this)


def check_run_workers(gpus: str | None, ray: str | None, device: str) -> None:
    """PipelineError when this machine cannot give the run the workers --gpus/--ray ask for."""
    if gpus is None and ray is None:
        return
    from autokernel.parallel.start import WorkersUnavailable, check_workers

    try:
        check_workers(gpus, ray, device)
    except WorkersUnavailable as exc:
        raise PipelineError(str(exc)) from None


def _resumable(options: ResumeOptions, state: RunState, progress: Progress) -> bool:
    """False for a finished run resumed with nothing new, which would stop at once: it says how
    to give it more time instead. A new budget must exceed the time the run has used."""
    from autokernel.loop.summary import more_hours
    from autokernel.text import format_duration

    used = format_duration(state.run_seconds)
    if options.hours is not None and options.hours * 3600.0 <= state.run_seconds:
        raise PipelineError(f"--hours {options.hours:g} is not more than the {used} this run "
                            "has used already; give it more")
    if not state.finished or options.anything_new():
        return True
    budget = f"{state.hours:g} h" if state.hours else "no limit"
    progress.say(f"{options.directory} is finished ({state.stop_reason or 'every target is done'}"
                 f"); it used {used} of {budget}. To give it more time:")
    progress.say(f"  autokernel resume {options.directory} --hours "
                 f"{more_hours(state.hours or state.run_seconds / 3600.0)}", soft_wrap=True)
    return False


def drive(workspace: Workspace, plan: Plan, state: RunState, config: LoopConfig, agent: Any,
          agent_note: str, progress: Progress, new_hours: float | None = None,
          make_agent: Callable[[], Any] | None = None) -> RunOutcome:
    """Run the loop with a dashboard to its end, then write the report and say the summary.
    With --gpus or --ray the loop hands experiments to workers (autokernel.parallel), and
    `make_agent` makes the agent of each further target when the agent serves only one."""
    from autokernel.loop.config import CPU_LOOP_NOTE
    from autokernel.loop.dashboard import status_text
    from autokernel.loop.journal import RunInconsistent
    from autokernel.loop.results import read_rows
    from autokernel.loop.runner import Runner
    from autokernel.loop.workspace import WorkspaceError

    progress.say(f"workspace: {workspace.root}")
    progress.say(agent_note)
    for target in state.targets:
        planned = plan.targets[target.index]
        shape = "x".join(str(d) for d in planned.bench_shape)
        progress.say(f"  {target.tag}: {planned.share:.1%} of the model's time, "
                     f"{shape} {planned.dtype}, {status_text(target.status)}")
    dashboard = progress.dashboard(
        title=f"autokernel {state.run_tag}", device=config.device, agent=config.agent,
        timing_note=CPU_LOOP_NOTE if config.device == "cpu" else "",
        history=read_rows(workspace.results_path),
    )
    from autokernel.parallel.scheduler import ParallelError
    from autokernel.parallel.start import WorkersUnavailable, parallel_runner, uses_workers

    try:
        runner: Any = (parallel_runner(workspace, plan, state, config, agent, make_agent,
                                       dashboard) if uses_workers(config)
                       else Runner(workspace, plan, state, config, agent, dashboard=dashboard))
    except WorkersUnavailable as exc:
        raise PipelineError(str(exc)) from None
    except KeyboardInterrupt:  # the loop handles Ctrl-C once it runs; before, nothing began
        raise PipelineError(f"interrupted before the next experiment: `autokernel resume "
                            f"{workspace.root}` continues", code=EXIT_INTERRUPTED) from None
    if new_hours is not None:
        runner.extend_hours(new_hours)
    try:
        reason = runner.run()
    except (WorkspaceError, RunInconsistent) as exc:
        raise PipelineError(str(exc), code=RUN_FAILED) from None
    except ParallelError as exc:
        raise PipelineError(str(exc)) from None
    spend = getattr(agent, "total", None)  # an LLM agent's usage over the whole run
    usage = spend.describe() if spend is not None and getattr(spend, "calls", 0) else ""
    progress.end_of_run(workspace, state, reason, usage)
    return RunOutcome(workspace=workspace, state=state, reason=reason)
