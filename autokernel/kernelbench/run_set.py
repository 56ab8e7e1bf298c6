"""A set of KernelBench-style problems, each through profile → run → verify in its own child
process, prepared and run for `autokernel kernelbench` (each problem's run is the pipeline's:
autokernel.pipeline.stages).

`prepare_kernelbench` checks the options, finds the problems, resolves the device and agent
and makes (or reopens, to resume) the set's directory; `run_kernelbench` runs the problems
that have no result yet, calling back as each starts, changes phase and ends.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autokernel.pipeline.options import DEFAULT_RUNS_DIR, PipelineError
from autokernel.pipeline.progress import Progress
from autokernel.pipeline.stages import resolve_device

if TYPE_CHECKING:
    from autokernel.kernelbench.problem import ProblemJob
    from autokernel.parallel.slots import Slot


@dataclass
class KernelbenchOptions:
    """What `autokernel kernelbench PATH...` takes."""

    paths: list[Path]
    minutes_per_problem: float = 15.0
    device: str | None = None
    dtype: str | None = None
    out: Path | None = None  # None: ./autokernel_runs/kernelbench-<timestamp>
    agent: str = "auto"
    top: int = 5
    all_kernels: bool = False
    claude_model: str | None = None
    max_cost: float | None = None
    seed: int = 0
    resume: bool = False  # continue the set in `out`
    gpus: str | None = None  # --gpus: a problem per GPU at once (None: one at a time)

    def check(self) -> None:
        from autokernel.pipeline.options import check_gpus

        check_gpus(self.gpus)
        if self.minutes_per_problem <= 0:
            raise PipelineError(f"--minutes-per-problem must be positive; got "
                                f"{self.minutes_per_problem:g}")
        if self.top < 1:
            raise PipelineError("--top must be at least 1")

    def agent_options(self) -> dict[str, Any]:
        given = (("seed", self.seed), ("model", self.claude_model), ("max_cost", self.max_cost))
        return {k: v for k, v in given if v is not None}


# A table mixes no GPUs, dtypes or budgets.
RESUMED_SETTINGS = ("device", "gpu", "dtype", "minutes_per_problem", "agent")


@dataclass
class KernelbenchSet:
    """A set ready to run: its problems and their directory names, the table's meta, the job
    every problem copies, and the records a resumed set keeps."""

    out: Path
    problems: list[Path]
    names: list[str]
    meta: dict[str, Any]
    template: ProblemJob
    agent_note: str
    finished: dict[str, dict[str, Any]]
    slots: list[Slot] | None = None  # --gpus: where problems run at once (None: one at a time)


def prepare_kernelbench(options: KernelbenchOptions, progress: Progress) -> KernelbenchSet:
    """Everything checked before the first problem starts (PipelineError naming the option)."""
    from autokernel.agents import AgentUnavailable, make_agent, resolve_agent_name
    from autokernel.kernelbench.problem import ProblemJob
    from autokernel.kernelbench.suite import (SuiteError, discover_problems, finished_records,
                                              problem_names)

    options.check()
    try:
        problems = discover_problems(options.paths)
    except SuiteError as exc:
        raise PipelineError(str(exc)) from None
    device = resolve_device(options.device, progress)
    dtype = options.dtype or ("fp16" if device == "cuda" else "fp32")
    slots = set_slots(options.gpus, device)
    agent_options = options.agent_options()
    try:
        agent_name, agent_note = resolve_agent_name(options.agent)
        make_agent(options.agent, **agent_options)  # refuse now, not once per problem
    except AgentUnavailable as exc:
        raise PipelineError(str(exc)) from None
    if options.resume and options.out is None:
        raise PipelineError("--resume needs --out DIR, the set to continue")
    out = options.out if options.out is not None else (
        DEFAULT_RUNS_DIR / time.strftime("kernelbench-%Y%m%d-%H%M%S"))
    if not options.resume:
        _check_out_dir(out)
    out.mkdir(parents=True, exist_ok=True)

    meta = set_meta(device, dtype, options.minutes_per_problem, agent_name)
    names = problem_names(problems)
    finished: dict[str, dict[str, Any]] = {}
    if options.resume:
        meta = resumed_meta(out, meta)
        finished = finished_records(out, names)
    template = ProblemJob(problem="", workspace="", result_path="", device=device, dtype=dtype,
                          minutes=options.minutes_per_problem, agent=agent_name,
                          agent_options=agent_options, top=options.top,
                          all_kernels=options.all_kernels)
    if slots is not None:
        meta["workers"] = [slot.label for slot in slots]
        if device == "cuda":  # the set's GPUs, not this process's first
            import torch

            meta["gpu"] = torch.cuda.get_device_name(int(slots[0].label.split(".")[0]))
    return KernelbenchSet(out=out, problems=problems, names=names, meta=meta,
                          template=template, agent_note=agent_note, finished=finished,
                          slots=slots)


def set_slots(gpus: str | None, device: str) -> list[Slot] | None:
    """The GPUs (interpreter workers on the CPU) --gpus gives the set, each running a problem
    at a time; GPUs of different models are refused (one table, one GPU model)."""
    if gpus is None:
        return None
    from autokernel.parallel.slots import GpuSpecError, local_slots, one_model

    try:
        slots = local_slots(gpus, device)
    except GpuSpecError as exc:
        raise PipelineError(str(exc)) from None
    if device == "cuda":
        import torch

        refusal = one_model({s.label: torch.cuda.get_device_name(int(s.label.split(".")[0]))
                             for s in slots})
        if refusal:
            raise PipelineError(refusal)
    return slots


def run_kernelbench(kset: KernelbenchSet, on_start: Callable[[int], None],
                    on_phase: Callable[[int, Any], None],
                    on_record: Callable[[int, dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Every problem's record, in order; the tables in `kset.out` are rewritten after each.
    SuiteInterrupted (or KeyboardInterrupt) on Ctrl-C, the tables so far written."""
    from autokernel.kernelbench.suite import run_suite
    from autokernel.kernelbench.table import write_tables

    def record_done(index: int, record: dict[str, Any], records: list[dict[str, Any]]) -> None:
        on_record(index, record)
        write_tables(kset.out, records, kset.meta, kset.names)

    if kset.slots is not None:
        from autokernel.kernelbench.on_gpus import run_suite_on_gpus

        records = run_suite_on_gpus(kset.problems, kset.out, kset.template, kset.slots,
                                    record_done, lambda index, path: on_start(index),
                                    kset.finished, on_phase=on_phase)
    else:
        records = run_suite(kset.problems, kset.out, kset.template, record_done,
                            lambda index, path: on_start(index), kset.finished,
                            on_phase=on_phase)
    write_tables(kset.out, records, kset.meta, kset.names)
    return records


def _check_out_dir(out: Path) -> None:
    from autokernel.loop.workspace import WorkspaceError, check_new_workspace_dir

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PipelineError(f"{out} already exists and is not empty; kernelbench needs a new "
                            "--out DIR")
    try:
        check_new_workspace_dir(out)  # the rule about other people's git work trees
    except WorkspaceError as exc:
        raise PipelineError(str(exc)) from None


def set_meta(device: str, dtype: str, minutes: float, agent: str) -> dict[str, Any]:
    """The set's settings, GPU, software and commit: the table's header."""
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


def resumed_meta(out: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """The set's first meta with this run's start appended; refuses a set run differently."""
    import json

    try:
        earlier = json.loads((out / "results.json").read_text(encoding="utf-8"))["meta"]
    except (OSError, ValueError, KeyError, TypeError):
        raise PipelineError(f"{out} is not a kernelbench set (no readable results.json); "
                            "--resume continues a set that `autokernel kernelbench --out DIR` "
                            "started") from None
    for key in RESUMED_SETTINGS:
        if earlier.get(key) != meta[key]:
            raise PipelineError(f"{out} was run with {key} {earlier.get(key)!r}, not "
                                f"{meta[key]!r}; resume it with the same settings")
    resumed = {**meta, **earlier, "resumed": [*earlier.get("resumed", []), meta["created"]]}
    resumed["commit"] = meta["commit"] if meta["commit"] == earlier.get("commit") else (
        f"{earlier.get('commit')}, resumed at {meta['commit']}")
    return resumed
