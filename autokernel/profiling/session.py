"""Profile a loaded model into a plan: the one sequence `autokernel profile`, `autokernel run` and
`autokernel kernelbench` share (`profile_plan`).

1. profile the eager forward (`profiler.profile_model`) and classify its time (`classify.py`);
2. rank the targets (`ranking.build_plan`);
3. ask verify's own routes which call sites they take (`splice_check.check_splices`), so that
   the plan's "verify splices" column is what verify will do;
4. when asked (by default on a GPU only: on the CPU compiling costs tens of seconds and the
   CPU's figures are not what a GPU run delivers), profile the model under torch.compile and
   give each target its share of the compiled forward (`compiled.py`);
5. rank by the eager shares or the compiled ones (`rank_by`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from autokernel.profiling.events import RecordedProfile
from autokernel.profiling.model_loader import LoadedModel
from autokernel.profiling.plan import RANK_BY, Plan


def compiles_by_default(device: str) -> bool:
    """Whether the compiled model is profiled when not asked either way: on a GPU, where
    Inductor's kernels are what a compiled model runs; not on the CPU, where compiling costs
    tens of seconds for a CPU figure nobody delivers."""
    return device == "cuda"


def profile_plan(loaded: LoadedModel, model: str, class_name: str, *, warmup: int = 3,
                 iters: int = 5, trace_path: str | Path | None = None,
                 compiled: bool | None = None, rank_by: str = "eager",
                 check_routes: bool = True,
                 progress: Callable[[str], None] | None = None) -> tuple[RecordedProfile, Plan]:
    """The model's recorded profile and its plan (see the module doc). `compiled`: profile the
    torch.compile'd model too (None: `compiles_by_default`); `rank_by`: "eager" or "compile"
    (which needs the compiled profile, so it turns `compiled` on); `progress(what)` hears each
    step."""
    from autokernel.profiling.classify import classify_profile
    from autokernel.profiling.profiler import profile_model
    from autokernel.profiling.ranking import build_plan, rank_plan
    from autokernel.profiling.splice_check import check_splices

    if rank_by not in RANK_BY:
        raise ValueError(f"rank_by must be one of {', '.join(RANK_BY)}, not {rank_by!r}")

    def tell(what: str) -> None:
        if progress is not None:
            progress(what)

    record = profile_model(loaded, warmup=warmup, iters=iters, trace_path=trace_path,
                           progress=progress)
    tell("recognizing ops")
    attributions = classify_profile(record)
    plan = build_plan(record, model=model, class_name=class_name, attributions=attributions,
                      warmup=warmup)
    if check_routes:
        tell("asking verify's routes which call sites they take")
        note = check_splices(plan, loaded)
        if note is not None:
            plan.notes.append(note)
    if compiled is None:
        compiled = compiles_by_default(loaded.device) or rank_by == "compile"
    if compiled and plan.targets:
        from autokernel.profiling.compiled import add_compiled_shares

        add_compiled_shares(plan, record, attributions, loaded, iters=iters, progress=progress)
    if rank_by == "compile" and plan.compile_ms is None:
        plan.notes.append("ranked by eager share: the compiled model has no profile")
        rank_by = "eager"
    rank_plan(plan, rank_by)
    return record, plan
