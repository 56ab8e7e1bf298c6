"""The typed options of a run, a resume and a verify, and the one error the pipeline raises.

The option names and messages are those of the `autokernel` command line (the CLI fills these
objects field for field), so a scheduler or a script that builds them gets the same refusals.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_RUNS_DIR = Path("autokernel_runs")
USAGE_ERROR = 2  # bad input: nothing was started
RUN_FAILED = 1  # the input was fine, the work failed
EXIT_INTERRUPTED = 130  # Ctrl-C: the run is saved and can be resumed


class PipelineError(Exception):
    """A stage refused or failed; `str()` is one line for the user and `code` the exit status
    the command line gives it (2: bad input, 1: the work failed, 130: interrupted)."""

    def __init__(self, message: str, code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class RunOptions:
    """Everything `autokernel run MODEL.py` takes (see `autokernel run -h` for each option)."""

    model_file: Path
    device: str | None = None  # None: cuda when a GPU is visible, else cpu
    dtype: str | None = None  # None: fp16 on cuda, fp32 on cpu
    class_name: str = "Model"
    top: int = 5
    only: frozenset[str] = frozenset()  # kernel types to optimize (empty: every type)
    skip: frozenset[str] = frozenset()  # kernel types to leave alone
    rank_by: str = "eager"
    plan_file: Path | None = None  # a saved plan instead of profiling again
    hours: float = 8.0
    kernel_minutes: float = 120.0
    max_consecutive_reverts: int = 5
    peak_fraction: float = 0.9
    target_speedup: float = 2.0
    speedup_baseline: str = "best"
    max_experiments_per_target: int | None = None
    min_gain: float = 0.01
    screen: bool = True
    bench_timeout: float | None = None  # None: 60 s on cuda, 300 s on cpu
    check_all_dtypes: bool = False
    agent: str = "auto"
    seed: int = 0
    claude_model: str | None = None
    max_cost: float | None = None
    max_llm_calls: int | None = None
    drafts: int = 1
    backend: str = "triton"
    out: Path | None = None  # None: ./autokernel_runs/<model>-<timestamp>
    yes: bool = False  # start a CPU night that would finish only a handful of experiments
    # Judge experiments on several GPUs (autokernel.parallel): --gpus all|N|0,2,3 on this
    # machine (interpreter workers on the CPU), or the GPUs of the Ray cluster at --ray.
    gpus: str | None = None  # None: the run's one device, in this process (as before)
    ray: str | None = None  # "auto" or the cluster's address

    def check(self) -> None:
        """Refuse bad values before anything starts (PipelineError naming the option)."""
        from autokernel.ops import KERNEL_TYPES

        if not self.model_file.is_file():
            raise PipelineError(f"model file not found: {self.model_file}")
        if self.rank_by not in ("eager", "compile"):
            raise PipelineError(f"--rank-by must be eager or compile, not {self.rank_by!r}")
        check_positive(self.hours, "--hours")
        check_positive(self.kernel_minutes, "--kernel-minutes")
        check_positive(self.bench_timeout, "--bench-timeout")
        check_positive(self.max_consecutive_reverts, "--max-consecutive-reverts",
                       allow_zero=True)
        check_positive(self.target_speedup, "--target-speedup", allow_zero=True)
        check_positive(self.max_experiments_per_target, "--max-experiments-per-target")
        check_positive(self.min_gain, "--min-gain", allow_zero=True)
        if self.drafts < 1:
            raise PipelineError(f"--drafts must be at least 1; got {self.drafts}")
        if self.top < 1:
            raise PipelineError("--top must be at least 1")
        if not 0 <= self.peak_fraction <= 1:
            raise PipelineError(f"--peak-fraction must be between 0 and 1; got "
                                f"{self.peak_fraction:g}")
        for option, names in (("--only", self.only), ("--skip", self.skip)):
            unknown = sorted(set(names) - set(KERNEL_TYPES))
            if unknown:
                raise PipelineError(f"{option}: unknown kernel type {', '.join(unknown)}; "
                                    f"known: {', '.join(KERNEL_TYPES)}")
        if self.plan_file is not None and not self.plan_file.is_file():
            raise PipelineError(f"plan file not found: {self.plan_file}")
        check_gpus(self.gpus)

    def agent_options(self) -> dict[str, Any]:
        """Only the agent options the user gave: an agent refuses one it cannot use (--max-cost
        to the tuner), so a default must not look given."""
        given = (("seed", self.seed), ("model", self.claude_model), ("max_cost", self.max_cost),
                 ("max_llm_calls", self.max_llm_calls),
                 ("drafts", self.drafts if self.drafts != 1 else None))
        return {k: v for k, v in given if v is not None}


@dataclass
class ResumeOptions:
    """What `autokernel resume DIR` takes: every None keeps the run's own setting."""

    directory: Path
    hours: float | None = None  # the whole run's new budget (active time since it started)
    agent: str | None = None
    max_cost: float | None = None
    max_llm_calls: int | None = None
    gpus: str | None = None  # None: the run's own (--gpus, --ray of `run`)
    ray: str | None = None

    def check(self) -> None:
        check_positive(self.hours, "--hours")
        check_gpus(self.gpus)

    def agent_options(self) -> dict[str, Any]:
        given = (("max_cost", self.max_cost), ("max_llm_calls", self.max_llm_calls))
        return {k: v for k, v in given if v is not None}

    def anything_new(self) -> bool:
        """Whether this resume gives the run more than it had (time, an agent, a cap)."""
        return any(v is not None for v in (self.hours, self.agent, self.max_cost,
                                           self.max_llm_calls))


@dataclass
class VerifyRequest:
    """What `autokernel verify DIR` takes."""

    directory: Path
    device: str | None = None
    iters: int | None = None  # None: as many rounds as `budget_s` allows
    budget_s: float = 20.0
    compile: bool | None = None  # None: time torch.compile on cuda only
    gradients: bool = True
    all_kernels: bool = False  # route every finished kernel, also those slower in the model

    def check(self) -> None:
        if self.iters is not None and self.iters < 1:
            raise PipelineError("--iters must be at least 1")
        if self.budget_s <= 0:
            raise PipelineError("--budget must be positive")


def check_positive(value: float | None, option: str, *, allow_zero: bool = False) -> None:
    """PipelineError when a given value is negative, or zero where zero means nothing."""
    if value is not None and (value < 0 or (value == 0 and not allow_zero)):
        raise PipelineError(f"{option} must be {'0 or more' if allow_zero else 'positive'}; "
                            f"got {value:g}")


def check_gpus(gpus: str | None) -> None:
    """PipelineError when --gpus is not all, a count or a list of indices."""
    if gpus is None:
        return
    from autokernel.parallel.slots import GpuSpecError, parse_gpus

    try:
        parse_gpus(gpus)
    except GpuSpecError as exc:
        raise PipelineError(str(exc)) from None
