"""The pipeline's stages, each usable alone: device, agent, plan (profiled or read), targets,
the loop's configuration, the CPU-night check and the new workspace. Each raises PipelineError
with a one-line reason; none prints except through the `Progress` it is given."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autokernel.pipeline.options import (EXIT_INTERRUPTED, RUN_FAILED, PipelineError,
                                         RunOptions)
from autokernel.pipeline.progress import Progress
from autokernel.text import error_summary

if TYPE_CHECKING:
    from autokernel.loop.config import LoopConfig
    from autokernel.loop.state import RunState
    from autokernel.loop.workspace import Workspace
    from autokernel.profiling.plan import Plan


def resolve_device(requested: str | None, progress: Progress) -> str:
    """The device to run on, prepared (the interpreter for cpu). Without a request, says which
    device was picked and why, as an aside (stdout may be JSON)."""
    from autokernel.device import DeviceError, device_choice_line, use_device
    from autokernel.device import resolve_device as resolve

    try:
        device = resolve(requested)
        use_device(device)
    except DeviceError as exc:
        raise PipelineError(str(exc)) from None
    if requested is None:
        progress.aside(device_choice_line(device))
    return device


def make_run_agent(name: str, options: dict[str, Any],
                   saved_options: dict[str, Any] | None = None) -> tuple[Any, str, str]:
    """The agent, its resolved name and the line saying why it was picked. `saved_options`: a
    resumed run's; those the chosen agent does not take are left behind (a run resumed with
    another agent than the first)."""
    from autokernel.agents import AGENT_OPTIONS, AgentUnavailable, make_agent, resolve_agent_name

    try:
        resolved, note = resolve_agent_name(name)
        kept = {k: v for k, v in (saved_options or {}).items() if k in AGENT_OPTIONS[resolved]}
        agent = make_agent(name, **{**kept, **options})
    except AgentUnavailable as exc:
        raise PipelineError(str(exc)) from None
    return agent, resolved, note


def profile_model(model_file: Path, class_name: str, dtype: str, device: str,
                  progress: Progress, rank_by: str = "eager") -> Plan:
    """Load and profile the model; its ranked plan. The model is let go before returning: the
    harness workers that follow allocate on the same GPU."""
    from autokernel.profiling.model_loader import ModelLoadError, load_model_file
    from autokernel.profiling.session import profile_plan

    try:
        loaded = load_model_file(model_file, class_name=class_name, dtype=dtype, device=device)
    except ModelLoadError as exc:
        raise PipelineError(str(exc)) from None
    progress.say(f"profiling {model_file} on {device} ({dtype})")
    with progress.steps(f"profiling {model_file}: warm-up and profiled forwards") as steps:
        try:
            record, plan = profile_plan(
                loaded, model=str(model_file), class_name=class_name, rank_by=rank_by,
                progress=lambda what: steps.step(f"profiling {model_file}: {what}"))
        except KeyboardInterrupt:
            raise PipelineError("interrupted while profiling; no workspace was created",
                                code=EXIT_INTERRUPTED) from None
        except Exception as exc:  # the forward ran once already: the machine's trouble, not input
            raise PipelineError(f"profiling {model_file} failed: {error_summary(exc)}",
                                code=RUN_FAILED) from None
    del loaded, record
    release_device_memory()
    return plan


def release_device_memory() -> None:
    """Give back what profiling left in this process's CUDA cache: the harness workers that
    follow allocate on the same GPU, and a huge model's cached blocks would crowd them out."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def load_plan_file(path: Path) -> Plan:
    from autokernel.profiling.plan import Plan

    try:
        return Plan.load(path)
    except (OSError, ValueError, TypeError, KeyError, json.JSONDecodeError) as exc:
        raise PipelineError(f"cannot read the plan {path}: {exc}") from None


def select_targets(plan: Plan, top: int, only: frozenset[str] | set[str],
                   skip: frozenset[str] | set[str]) -> list[int]:
    """Indices of the plan's targets to optimize: the `top` highest-ranked among the types
    `only` names (every type when empty) and `skip` does not."""
    chosen = [
        i for i, t in enumerate(plan.targets)
        if (not only or t.kernel_type in only) and t.kernel_type not in skip
    ]
    return chosen[:top]


def loop_config(options: RunOptions, device: str, dtype: str, agent_name: str) -> LoopConfig:
    """The loop's configuration from a run's options on a resolved device, dtype and agent."""
    from autokernel.loop.config import LoopConfig
    from autokernel.orchestrate import MoveOnConfig

    return LoopConfig(
        device=device,
        dtype=dtype,
        agent=agent_name,
        hours=options.hours,
        move_on=MoveOnConfig(
            max_consecutive_reverts=options.max_consecutive_reverts or None,
            peak_fraction=options.peak_fraction or None,
            target_seconds=options.kernel_minutes * 60.0,
            target_speedup=options.target_speedup or None,
            speedup_baseline=options.speedup_baseline,
            max_experiments=options.max_experiments_per_target,
        ),
        bench_timeout_s=options.bench_timeout or default_bench_timeout(device),
        # The interpreter is ~1000x slower than a GPU: the harness's smaller sweep keeps a cpu
        # run (CI's end-to-end test) in minutes; every detector still runs.
        harness_quick=device == "cpu",
        check_all_dtypes=options.check_all_dtypes,
        min_keep_margin=options.min_gain,
        screen=options.screen,
        seed=options.seed,
        backend=options.backend,
        # --ray alone: every GPU of the cluster.
        gpus=options.gpus if options.gpus is not None or options.ray is None else "all",
        ray=options.ray,
    )


def default_bench_timeout(device: str) -> float:
    """Seconds before a candidate counts as hung: the interpreter is ~1000x slower."""
    return 60.0 if device == "cuda" else 300.0


def check_cpu_night(plan: Plan, chosen: list[int], config: LoopConfig, yes: bool,
                    progress: Progress) -> None:
    """Say what a CPU night will get through; refuse, unless `yes`, one that would finish fewer
    than a handful of experiments (a GPU-sized model in the Triton interpreter)."""
    from autokernel.loop.cpu_estimate import estimate
    from autokernel.text import format_duration

    night = estimate(plan, chosen, config.hours, config.bench_timeout_s)
    warning = night.warning()
    if not warning:
        progress.say(f"on the CPU an experiment takes about "
                     f"{format_duration(night.mean_seconds)} in the Triton interpreter: about "
                     f"{night.experiments:.0f} in {config.hours:g} h")
        return
    if not yes:
        raise PipelineError(f"{warning}; run it on a GPU, try a smaller model such as "
                            "examples/models/tiny_llama.py, or pass --yes to start anyway")
    progress.say(f"warning: {warning}; starting anyway (--yes)", style="yellow")


def create_workspace(root: Path, run_tag: str, model_file: Path, class_name: str, plan: Plan,
                     chosen: list[int], config: LoopConfig,
                     agent_options: dict[str, Any]) -> tuple[Workspace, RunState]:
    """A new run's workspace under `root` (git repository, model copy, program.md, reference.py,
    plan.json, run.json, results.tsv) and its first state: the one way a run's workspace is
    made, by `autokernel run` and by each kernelbench problem."""
    from autokernel import reference
    from autokernel.agents import PROGRAM_PATH
    from autokernel.loop.results import ResultsLog
    from autokernel.loop.state import RunState, TargetState
    from autokernel.loop.workspace import BRANCH_PREFIX, Workspace, WorkspaceError
    from autokernel.versions import software_versions

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
        raise PipelineError(str(exc)) from None
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
