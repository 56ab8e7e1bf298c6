"""The pipeline below the command line: profile → plan → workspace → loop → verify/report.

Each entry point takes one typed options object and a `Progress` (how it talks), and raises
`PipelineError` (a one-line reason and an exit status) when refused or failed:

- `run_pipeline(RunOptions, progress) -> RunOutcome`: `autokernel run`;
- `resume_pipeline(ResumeOptions, progress) -> RunOutcome`: `autokernel resume`;
- `verify_pipeline(VerifyRequest, progress) -> dict`: `autokernel verify` (verify.json's record).

`autokernel kernelbench` runs a set of problems, each through these stages in a child process
(autokernel.kernelbench.run_set).

`stages` holds the steps each of them is made of (device, agent, plan, targets, loop config,
workspace), for a caller that runs them its own way (kernelbench's problems, a scheduler).
The CLI only parses its options into these objects, calls, and prints; nothing here imports it.
"""

from autokernel.pipeline.options import (DEFAULT_RUNS_DIR, EXIT_INTERRUPTED, RUN_FAILED,
                                         USAGE_ERROR, PipelineError, ResumeOptions, RunOptions,
                                         VerifyRequest)
from autokernel.pipeline.progress import Progress
from autokernel.pipeline.run import RunOutcome, resume_pipeline, run_pipeline
from autokernel.pipeline.verify import verify_pipeline

__all__ = [
    "DEFAULT_RUNS_DIR", "EXIT_INTERRUPTED", "RUN_FAILED", "USAGE_ERROR", "PipelineError",
    "Progress", "ResumeOptions", "RunOptions", "RunOutcome", "VerifyRequest", "resume_pipeline",
    "run_pipeline", "verify_pipeline",
]
