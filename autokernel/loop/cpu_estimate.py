"""How long an experiment takes on the CPU, where every Triton kernel runs in the interpreter.

The interpreter runs each program instance of a kernel as Python over NumPy blocks, so a call
costs roughly its bytes moved at `INTERPRETER_BYTES_PER_S` or its FLOPs at
`INTERPRETER_FLOPS_PER_S`, whichever is slower. Both rates were measured on the starters in
this repository's CI container (2 shared cores, triton 3.6): rmsnorm at 64x4096 and 1024x4096
(1.9 and 1.5 MB/s), softmax at 64x8192 (3.1 MB/s), matmul at 256x512x256 (41 MFLOP/s). An
experiment runs the candidate on the small correctness and sweep shapes of its op (about
`EXPERIMENT_OVERHEAD_S`, the time a tiny model's experiments take) and some
`CALLS_AT_MODEL_SHAPE` times at the model's own shape (correctness stages, timing rounds).

The figure is an order of magnitude, enough to tell a five-minute quick start from a model
whose every experiment would outlast the harness's timeout: `autokernel run` warns before a
GPU-sized model starts a CPU night that would finish fewer than `HANDFUL` experiments.
"""

from __future__ import annotations

from dataclasses import dataclass

from autokernel.profiling.plan import Plan, Target
from autokernel.text import count_of, format_duration

INTERPRETER_BYTES_PER_S = 2e6
INTERPRETER_FLOPS_PER_S = 4e7
EXPERIMENT_OVERHEAD_S = 15.0
CALLS_AT_MODEL_SHAPE = 10
HANDFUL = 5  # a night that finishes fewer experiments than this has learnt nothing


def call_seconds(target: Target) -> float:
    """One interpreted call of a kernel at the target's primary shape, roughly."""
    from autokernel.ops import get_spec
    from autokernel.ops.spec import parse_dtype

    spec = get_spec(target.kernel_type)
    shape = tuple(target.bench_shape)
    try:
        work_bytes = spec.bytes(shape, parse_dtype(target.dtype))
        flops = spec.flops(shape)
    except (ValueError, TypeError, KeyError):  # a shape the formulas do not take: no estimate
        return 0.0
    return max(work_bytes / INTERPRETER_BYTES_PER_S, flops / INTERPRETER_FLOPS_PER_S)


def experiment_seconds(target: Target) -> float:
    """One experiment on the target, in the Triton interpreter, roughly."""
    return EXPERIMENT_OVERHEAD_S + CALLS_AT_MODEL_SHAPE * call_seconds(target)


@dataclass(frozen=True)
class CpuEstimate:
    slowest: Target  # the chosen target whose experiments take longest
    slowest_seconds: float
    mean_seconds: float  # an experiment, averaged over the chosen targets
    experiments: float  # about how many the budget finishes
    hours: float | None
    timeout_s: float

    @property
    def times_out(self) -> bool:
        """The slowest target's every experiment would outlast the harness's timeout."""
        return self.slowest_seconds > self.timeout_s

    @property
    def too_slow(self) -> bool:
        return self.times_out or (self.hours is not None and self.experiments < HANDFUL)

    def warning(self) -> str:
        """Why this night is not worth starting on the CPU ("" when it is)."""
        if not self.too_slow:
            return ""
        shape = "x".join(str(d) for d in self.slowest.bench_shape)
        where = f"{self.slowest.label} at {shape}"
        if self.times_out:
            return (f"on the CPU one experiment on {where} would take about "
                    f"{format_duration(self.slowest_seconds)} in the Triton interpreter, longer "
                    f"than the {format_duration(self.timeout_s)} a candidate gets "
                    "(--bench-timeout): every experiment on it would time out")
        return (f"on the CPU one experiment takes about {format_duration(self.mean_seconds)} "
                f"in the Triton interpreter ({where} is the slowest, about "
                f"{format_duration(self.slowest_seconds)}), so "
                f"{format_duration((self.hours or 0) * 3600.0)} would finish about "
                f"{count_of(int(self.experiments), 'experiment')}")


def estimate(plan: Plan, chosen: list[int], hours: float | None,
             timeout_s: float) -> CpuEstimate:
    """The CPU night ahead for the plan's chosen targets."""
    targets = [plan.targets[i] for i in chosen]
    seconds = [experiment_seconds(t) for t in targets]
    slowest = max(range(len(targets)), key=seconds.__getitem__)
    # A target whose experiments time out costs the timeout each, not its estimate.
    mean = sum(min(s, timeout_s) for s in seconds) / len(seconds)
    experiments = hours * 3600.0 / mean if hours is not None else float("inf")
    return CpuEstimate(targets[slowest], seconds[slowest], mean, experiments, hours, timeout_s)
