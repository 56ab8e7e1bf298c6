"""From a run's `--gpus`/`--ray` to its workers and its parallel loop: what the pipeline calls.

`check_workers` refuses an impossible request before anything is profiled; `parallel_runner`
builds the pool (`local.LocalPool`, or `ray_backend.RayPool` once connected to the cluster) and
the head's loop (`scheduler.ParallelRunner`). Ray is imported only when --ray is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autokernel.loop.config import LoopConfig
from autokernel.loop.dashboard import Dashboard
from autokernel.loop.state import RunState
from autokernel.loop.workspace import Workspace
from autokernel.parallel.agents import TargetAgents
from autokernel.parallel.local import LocalPool
from autokernel.parallel.scheduler import ParallelRunner, WorkerPool
from autokernel.parallel.slots import GpuSpecError, local_slots, parse_gpus
from autokernel.profiling.plan import Plan

WORKERS_DIR = "workers"  # under the workspace's .cache/: each local worker's own directory


class WorkersUnavailable(RuntimeError):
    """--gpus/--ray cannot be honoured here; one line for the user."""


def check_workers(gpus: str | None, ray: str | None, device: str) -> None:
    """Refuse, before anything is profiled, a --gpus this machine does not have or a --ray
    without Ray installed (the cluster itself is asked when the loop starts)."""
    try:
        if ray is not None:
            from autokernel.parallel.ray_backend import RayUnavailable, ray_module

            if gpus is not None:
                parse_gpus(gpus)
            try:
                ray_module()
            except RayUnavailable as exc:
                raise WorkersUnavailable(str(exc)) from None
        elif gpus is not None:
            local_slots(gpus, device)
    except GpuSpecError as exc:
        raise WorkersUnavailable(str(exc)) from None


def make_pool(config: LoopConfig, workspace: Workspace, run_tag: str) -> WorkerPool:
    """The run's workers: a Ray actor per GPU of the cluster at config.ray, else a process per
    GPU (per interpreter worker on the CPU) of this machine."""
    try:
        if config.ray is not None:
            from autokernel.parallel.ray_backend import RayPool, RayUnavailable, cluster_slots, \
                connect

            try:
                connect(config.ray)
                count = cluster_slots(config.gpus or "all", config.device)
            except RayUnavailable as exc:
                raise WorkersUnavailable(str(exc)) from None
            return RayPool(count, config.device, run_tag)
        # The harness cache a one-GPU run of this workspace uses too (a resume may switch).
        return LocalPool(local_slots(config.gpus or "1", config.device),
                         workspace.cache_dir / WORKERS_DIR, workspace.cache_dir / "harness")
    except GpuSpecError as exc:
        raise WorkersUnavailable(str(exc)) from None


def parallel_runner(workspace: Workspace, plan: Plan, state: RunState, config: LoopConfig,
                    agent: Any, make_agent: Callable[[], Any] | None,
                    dashboard: Dashboard) -> ParallelRunner:
    """The head's loop over the run's workers; `make_agent` makes another agent like `agent`
    for a target of its own (None: `agent` serves every target)."""
    pool = make_pool(config, workspace, state.run_tag)
    return ParallelRunner(workspace, plan, state, config, TargetAgents(agent, make_agent), pool,
                          dashboard=dashboard)


def uses_workers(config: LoopConfig) -> bool:
    """Whether the run's experiments are judged by workers (--gpus or --ray)."""
    return config.gpus is not None or config.ray is not None
