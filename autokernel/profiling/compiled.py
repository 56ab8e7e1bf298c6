"""What torch.compile leaves: the compiled model profiled beside the eager one
(`add_compiled_shares`).

A kernel that beats eager PyTorch may still lose to the model compiled: Inductor fuses the
elementwise work around a norm or an activation into one kernel, and what is left of a target
there is what a kernel of ours can still win under torch.compile. So the model is compiled
(`torch.compile`, Inductor, on the same inputs), warmed up until it runs compiled, and profiled
like the eager one; each target gets the share of the compiled forward's time its ops still take
(`compiled_map.py` maps Inductor's kernels to the targets by the aten ops their names list).

A compile that fails (a compiler error, a missing C++ compiler on the CPU) is a note in the plan,
never an error of the profile; graph breaks are a note too (the figures then include the eager
code between the graphs). Nothing here runs, nor is torch._inductor imported, unless asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autokernel.profiling.callsites import Attribution
from autokernel.profiling.compiled_map import OTHER_KEY, compiled_times
from autokernel.profiling.events import RecordedProfile
from autokernel.profiling.model_loader import LoadedModel, call_forward
from autokernel.profiling.plan import Plan
from autokernel.text import count_of, error_summary

# Forwards before profiling: the first compiles, the second runs the compiled code once
# (lazy initialisation, autotuning's choices) so that the profiled ones are steady.
COMPILED_WARMUP = 2
# Inductor settings for a profile: CPU kernels in profiler ranges of their own (each named after
# its aten ops, as GPU kernels always are), and names that list the original aten ops.
PROFILED_INDUCTOR = {"cpp.enable_kernel_profile": True,
                     "triton.descriptive_names": "original_aten"}


def profile_compiled(loaded: LoadedModel, iters: int = 5,
                     progress: Callable[[str], None] | None = None,
                     slow_forward_s: float = 0.5) -> RecordedProfile:
    """The torch.compile'd model's forward, profiled `iters` times after COMPILED_WARMUP (once
    when a forward takes longer than `slow_forward_s`). Raises what compiling raises."""
    import time

    import torch
    import torch._inductor.config as inductor_config
    from torch.autograd.profiler import profile

    from autokernel.profiling.cpu_record import record_from_cpu
    from autokernel.profiling.profiler import record_from_events, without_profiler_chatter

    def tell(what: str) -> None:
        if progress is not None:
            progress(what)

    device = loaded.device

    def forward(model: Any) -> float:
        start = time.perf_counter()
        call_forward(model, loaded.inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    with inductor_config.patch(PROFILED_INDUCTOR), torch.no_grad():
        compiled = torch.compile(loaded.model)
        for index in range(COMPILED_WARMUP):
            tell("compiling the model (torch.compile)" if index == 0
                 else "warm-up forward of the compiled model")
            seconds = forward(compiled)
        prof = profile(use_cpu=True, use_device="cuda" if device == "cuda" else None,
                       use_kineto=True)
        with without_profiler_chatter():
            prof.__enter__()
        profiled = 0
        try:
            while profiled < iters:
                tell(f"profiled forward {profiled + 1} of {iters} of the compiled model")
                seconds = forward(compiled)
                profiled += 1
                if seconds > slow_forward_s:
                    break
        finally:
            with without_profiler_chatter():
                prof.__exit__(None, None, None)
    tell("reading the compiled model's profile")
    if device == "cpu":
        return record_from_cpu(prof.kineto_results, dtype=loaded.dtype_name, iterations=profiled)
    return record_from_events(prof.function_events, device=device, dtype=loaded.dtype_name,
                              iterations=profiled)


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def apply_compiled_profile(plan: Plan, eager: RecordedProfile,
                           attributions: Sequence[Attribution], compiled: RecordedProfile) -> None:
    """Each target's share of the compiled forward's time, and the compiled total, on the plan."""
    times, total_us = compiled_times(plan, eager, attributions, compiled)
    per_ms = 1.0 / (1000.0 * max(1, compiled.iterations))
    plan.compile_ms = total_us * per_ms
    for target in plan.targets:
        mine = times.get((target.kernel_type, target.role), 0.0)
        target.compile_ms = mine * per_ms
        target.compile_share = mine / total_us if total_us else 0.0
    plan.compile_other_share = times.get(OTHER_KEY, 0.0) / total_us if total_us else 0.0


def add_compiled_shares(plan: Plan, eager: RecordedProfile, attributions: Sequence[Attribution],
                        loaded: LoadedModel, iters: int = 5,
                        progress: Callable[[str], None] | None = None) -> None:
    """Profile the compiled model and put its shares on the plan; a failure, or graph breaks,
    go into the plan's notes."""
    import torch

    try:
        before = _graph_breaks()
        compiled = profile_compiled(loaded, iters=iters, progress=progress)
        breaks = _graph_breaks() - before
    except Exception as exc:  # a compiler error is the compiler's, not the profile's
        plan.notes.append(f"torch.compile failed, so the plan has no compiled shares: "
                          f"{error_summary(exc)}")
        return
    finally:
        # The compiled graphs hold device memory the harness workers that follow will want.
        torch._dynamo.reset()
    apply_compiled_profile(plan, eager, attributions, compiled)
    if breaks:
        plan.notes.append(f"torch.compile: {count_of(breaks, 'graph break')}; the compiled "
                          "figures include the eager code between the graphs")
