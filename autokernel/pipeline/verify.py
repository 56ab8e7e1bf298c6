"""A finished run's verification: its kernels spliced into its model, the output and gradients
checked, the kernels that make it faster kept, the deliveries timed end to end."""

from __future__ import annotations

from typing import Any

from autokernel.pipeline.options import PipelineError, VerifyRequest
from autokernel.pipeline.progress import Progress
from autokernel.pipeline.stages import resolve_device


def verify_pipeline(request: VerifyRequest, progress: Progress | None = None) -> dict[str, Any]:
    """verify.json's record (also written in the workspace); `record["passed"]` is the verdict.
    PipelineError when the directory is no run, has no finished kernel, or no longer loads."""
    from autokernel.integrate.loader import RunError, open_run
    from autokernel.integrate.verify import VerifyLog, VerifyOptions, verify_run

    progress = progress if progress is not None else Progress()
    request.check()
    try:
        run = open_run(request.directory, include_slower=request.all_kernels)
        run.require_any_finished()
    except RunError as exc:
        raise PipelineError(str(exc)) from None
    device = resolve_device(request.device, progress)
    options = VerifyOptions(
        device=device, iters=request.iters, budget_s=request.budget_s,
        gradients=request.gradients,
        compile=request.compile if request.compile is not None else device == "cuda",
    )
    loading = f"verifying {request.directory}: loading the model and its kernels"
    with progress.steps(loading) as steps:
        def emit(line: str) -> None:
            progress.say(line)
            steps.step(f"verifying: {line.split(':')[0]}")

        log = VerifyLog(emit=emit)
        if not options.compile:
            log.note("torch.compile not timed (--compile to time it)")
        if run.device != device:
            log.note(f"the run optimized its kernels on {run.device}; this check runs on "
                     f"{device}")
        if run.device == "cpu" and not request.all_kernels:
            log.note("every finished kernel is spliced in: the run timed them in the Triton "
                     "interpreter, whose timings say nothing about speed (a run on a GPU "
                     "splices in only the kernels faster than eager PyTorch)")
        try:
            return verify_run(run, options, log)
        except RunError as exc:
            raise PipelineError(str(exc)) from None
