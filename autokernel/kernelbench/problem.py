"""One KernelBench-style problem through profile → run → verify, in this process.

`run_problem(job)` calls the stages' Python APIs in turn (the same ones `autokernel profile`,
`run` and `verify` use) and returns the problem's record; it never raises: a stage that fails
ends the problem with its name and a one-line reason, and the traceback goes to the log (this
process's stdout), never to the table.

The suite runs each problem in a child process, `python -m autokernel.kernelbench.problem JOB`,
so that nothing one problem does (a CUDA error that poisons the context, a segfault in the
interpreter, a hang, memory it never frees) reaches the next one.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autokernel.text import error_summary

if TYPE_CHECKING:
    from autokernel.integrate.loader import FinishedRun
    from autokernel.loop.state import RunState
    from autokernel.profiling.plan import Plan

CLASS_NAME = "Model"  # KernelBench's convention
# What a record's speedup_vs_eager / speedup_vs_compile (and so fast_p) are: verify's end-to-end
# device time per forward. wall_speedup_* are its wall time per synchronized forward, apart.
DEVICE_FIGURE = "device time per forward"
VERIFY_CPU_ROUNDS = 3  # interpreter timings mean nothing; a few rounds show that it runs

# Statuses of a problem's record.
DONE = "done"  # verified end to end
NO_TARGET = "no optimizable target"
NO_KERNEL = "no passing kernel"
ERROR = "error"
TIMEOUT = "timeout"
CRASHED = "crashed"
INTERRUPTED = "interrupted"


@dataclass
class ProblemJob:
    """Everything the child process needs to run one problem (passed as a JSON file)."""

    problem: str  # the problem file
    workspace: str  # a new directory: the run's workspace
    result_path: str  # where the child writes the record (JSON)
    device: str
    dtype: str
    minutes: float  # the optimization loop's time budget
    agent: str  # a resolved agent name: tuner or claude
    agent_options: dict[str, Any] = field(default_factory=dict)
    top: int = 5
    all_kernels: bool = False
    verify_budget_s: float = 20.0

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> ProblemJob:
        return cls(**json.loads(path.read_text(encoding="utf-8")))


class StageFailure(Exception):
    """A stage could not complete; `str()` is the one-line reason."""

    def __init__(self, stage: str, reason: str, status: str = ERROR) -> None:
        super().__init__(reason)
        self.stage = stage
        self.status = status


def one_line(exc: BaseException) -> str:
    return error_summary(exc, limit=300)


def new_record(job: ProblemJob) -> dict[str, Any]:
    """A problem's record before anything ran; every field the tables read is present."""
    return {
        "problem": Path(job.problem).stem, "file": str(job.problem), "status": ERROR,
        "stage": None, "reason": "", "correctness": "–", "correct": False,
        "speedup_vs_eager": None, "speedup_vs_compile": None, "compile_vs_eager": None,
        "speedup_figure": DEVICE_FIGURE, "wall_speedup_vs_eager": None,
        "wall_speedup_vs_compile": None, "timing_meaningful": job.device == "cuda",
        "targets": [], "notes": [],
        "workspace": str(job.workspace), "device": job.device, "dtype": job.dtype, "gpu": None,
        "seconds": None,
    }


# ---------------------------------------------------------------------------------------------
# The stages


def profile_stage(job: ProblemJob) -> Plan:
    import torch

    from autokernel.profiling.model_loader import ModelLoadError, load_model_file
    from autokernel.profiling.session import profile_plan

    try:
        loaded = load_model_file(job.problem, class_name=CLASS_NAME, dtype=job.dtype,
                                 device=job.device)
    except ModelLoadError as exc:
        raise StageFailure("load", str(exc)) from None
    try:
        _, plan = profile_plan(loaded, model=job.problem, class_name=CLASS_NAME)
    except Exception as exc:
        traceback.print_exc()
        raise StageFailure("profile", one_line(exc)) from None
    del loaded  # the harness and verify need the device memory
    if job.device == "cuda":
        torch.cuda.empty_cache()
    return plan


def run_stage(job: ProblemJob, plan: Plan, emit: Callable[[str], None]) -> RunState:
    """The optimization loop on the plan's top targets, for `job.minutes`, in a new workspace."""
    from autokernel.agents import AgentUnavailable, make_agent
    from autokernel.loop.config import LoopConfig
    from autokernel.loop.dashboard import PlainDashboard
    from autokernel.loop.runner import Runner
    from autokernel.loop.workspace import (
        WorkspaceError,
        check_new_workspace_dir,
        run_tag_for,
    )
    from autokernel.orchestrate import MoveOnConfig
    from autokernel.pipeline.options import PipelineError
    from autokernel.pipeline.stages import create_workspace, default_bench_timeout

    root = Path(job.workspace)
    try:
        check_new_workspace_dir(root)
        agent = make_agent(job.agent, **job.agent_options)
    except (WorkspaceError, AgentUnavailable) as exc:
        raise StageFailure("run", str(exc)) from None
    config = LoopConfig(
        device=job.device, dtype=job.dtype, agent=job.agent, hours=job.minutes / 60.0,
        # The problem's budget is the only clock: each target gets its share of it.
        move_on=MoveOnConfig(target_seconds=None),
        # As `autokernel run`: the interpreter is ~1000x slower, so it gets longer and the
        # harness's smaller sweep.
        bench_timeout_s=default_bench_timeout(job.device),
        harness_quick=job.device == "cpu",
    )
    run_tag = run_tag_for(job.problem, time.strftime("%Y%m%d-%H%M%S"))
    chosen = list(range(min(job.top, len(plan.targets))))
    try:  # the pipeline's own stage, so the workspace is exactly what `autokernel run` makes
        workspace, state = create_workspace(root, run_tag, Path(job.problem), CLASS_NAME, plan,
                                            chosen, config, job.agent_options)
    except PipelineError as exc:
        raise StageFailure("run", f"cannot create the workspace {root}: {exc}") from None
    runner = Runner(workspace, plan, state, config, agent, dashboard=PlainDashboard())
    emit(f"stopped: {runner.run()}")
    return state


def open_verified_run(job: ProblemJob) -> FinishedRun:
    """The run as verify sees it: every finished kernel is a candidate, and verify's in-context
    selection routes only those that make the model faster (all of them with --all-kernels)."""
    from autokernel.integrate.loader import RunError, open_run

    run = open_run(job.workspace, include_slower=job.all_kernels)
    try:
        run.require_any_finished()
    except RunError as exc:
        raise StageFailure("verify", str(exc), status=NO_KERNEL) from None
    return run


def verify_stage(job: ProblemJob, record: dict[str, Any], emit: Callable[[str], None]
                 ) -> dict[str, Any]:
    from autokernel.integrate.loader import RunError
    from autokernel.integrate.verify import VerifyLog, VerifyOptions, verify_run

    run = open_verified_run(job)
    cuda = job.device == "cuda"
    options = VerifyOptions(device=job.device, iters=None if cuda else VERIFY_CPU_ROUNDS,
                            compile=cuda, budget_s=job.verify_budget_s)
    try:
        return verify_run(run, options, VerifyLog(emit=emit))
    except RunError as exc:
        raise StageFailure("verify", str(exc)) from None
    except Exception as exc:
        traceback.print_exc()
        raise StageFailure("verify", one_line(exc)) from None


# ---------------------------------------------------------------------------------------------
# The record


def target_rows(state: RunState, plan: Plan, verified: dict[str, Any] | None
                ) -> list[dict[str, Any]]:
    """Per target: what the loop did and, once verified, whether the model used its kernel."""
    spliced = {k["tag"]: k for k in (verified or {}).get("kernels", [])}
    rows = []
    for target in state.targets:
        best = target.best if target.best is not None and target.best.passed else None
        routed = spliced.get(target.tag)
        rows.append({
            "tag": target.tag, "kernel_type": target.kernel_type,
            "share": plan.targets[target.index].share, "status": target.status,
            "stop_reason": target.stop_reason, "experiments": target.experiments,
            "keeps": target.keeps, "kernel": bool(target.kernel_file),
            "speedup_vs_eager": best.speedup_vs_eager if best else None,
            "speedup_vs_compile": best.speedup_vs_compile if best else None,
            # routed in the delivered eager model: verify kept it there
            "spliced": routed is not None and routed.get("selected", {}).get("eager", True),
            "calls_per_forward": routed["calls_per_forward"] if routed else None,
        })
    return rows


def fill_from_verify(record: dict[str, Any], verified: dict[str, Any]) -> None:
    """The record's verdict and speedups from a verify result: speedup_vs_* are device time per
    forward (what fast_p uses), wall_speedup_vs_* wall time per synchronized forward."""
    from autokernel.integrate.end_to_end import DEVICE, WALL, figure, speedup_figure

    device, wall = speedup_figure(verified, DEVICE), speedup_figure(verified, WALL)
    method = (figure(verified, DEVICE) or {}).get("method")
    record.update({
        "status": DONE, "stage": None, "reason": "",
        "correct": bool(verified["passed"]),
        "correctness": "PASS" if verified["passed"] else "FAIL",
        "speedup_vs_eager": device.get("vs_eager"),
        "speedup_vs_compile": device.get("vs_compile"),
        "compile_vs_eager": device.get("compile_vs_eager"),
        "speedup_figure": f"{DEVICE_FIGURE} ({method})" if method else DEVICE_FIGURE,
        "wall_speedup_vs_eager": wall.get("vs_eager"),
        "wall_speedup_vs_compile": wall.get("vs_compile"),
        "timing_meaningful": verified.get("timing", {}).get("meaningful", False),
        "gpu": verified.get("gpu"),
        # what in-context selection kept (speedup_vs_* are the model with these kernels) and
        # the delivery verify chose
        "selection": verified.get("selection"),
        "delivery": {k: v for k, v in (verified.get("delivery") or {}).items()
                     if k in ("mode", "kernels", "why")} or None,
    })
    if not verified["accuracy"]["passed"]:
        accuracy = verified["accuracy"]
        record["reason"] = (f"output relative error {accuracy['error_patched']:.2e} > bound "
                            f"{accuracy['bound']:.2e}")
    elif verified.get("gradients", {}).get("passed") is False:
        record["reason"] = "parameter gradients out of tolerance"
    record["notes"].extend(verified.get("notes", []))


def run_problem(job: ProblemJob, emit: Callable[[str], None] = print) -> dict[str, Any]:
    """Profile, optimize and verify one problem; the record says how far it got and why."""
    record = new_record(job)
    started = time.perf_counter()
    state = plan = verified = None
    try:
        plan = profile_stage(job)
        if not plan.targets:
            Path(job.workspace).mkdir(parents=True, exist_ok=True)
            plan.save(Path(job.workspace) / "plan.json")
            raise StageFailure("profile", plan.message or "no optimizable kernel",
                               status=NO_TARGET)
        state = run_stage(job, plan, emit)
        verified = verify_stage(job, record, emit)
        fill_from_verify(record, verified)
    except StageFailure as failure:
        record.update(status=failure.status, stage=failure.stage, reason=str(failure))
    except Exception as exc:  # a bug or the machine's trouble: still one line in the table
        traceback.print_exc()
        record.update(status=ERROR, reason=one_line(exc))
    if state is not None and plan is not None:
        record["targets"] = target_rows(state, plan, verified)
        _write_report(Path(job.workspace))
    record["seconds"] = round(time.perf_counter() - started, 1)
    return record


def _write_report(root: Path) -> None:
    from rich.console import Console

    from autokernel.integrate.report import report_at_end_of_run

    report_at_end_of_run(root, Console(file=sys.stdout, width=120))  # never raises


def write_record(record: dict[str, Any], path: Path) -> None:
    from autokernel.files import atomic_write_text

    atomic_write_text(path, json.dumps(record, indent=2, default=str) + "\n")


def main(argv: list[str] | None = None) -> int:
    """The child process: `python -m autokernel.kernelbench.problem JOB.json`."""
    args = sys.argv[1:] if argv is None else argv
    job = ProblemJob.load(Path(args[0]))
    from autokernel.device import use_device

    use_device(job.device)
    record = run_problem(job)
    write_record(record, Path(job.result_path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
