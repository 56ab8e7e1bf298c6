"""The plan's "verify splices" column, asked of verify's own routes: `check_splices`.

The op entries' static answers (`routable.py`) read the profile; they can be wrong where a route
refuses what looks routable (a probe that fails, a parameter the kernel was not verified with, a
call inside a torch function) or takes what looks unroutable. So after the plan is built, each
target is given to `autokernel.integrate.patch.patch_model` exactly as verify would give it a
finished kernel: the same manifest entry (`integrate.loader.manifest_entry`: dtypes, verified
params, call sites, tolerances, limits), with the op's stock PyTorch path standing in for the
kernel (the routes and their probes decide before any kernel runs, and the stock path takes
every input a kernel could; probes ask the op's reference, as in verify). One forward of the
patched model then counts, per call site, the calls the routes took and those they left to
PyTorch, with why, and each site's cell says so:

- taken: the route's word from the op entry ("module", "call", "call chain"), or the kind of
  route that took it where the op entry could not tell ("function?" → "function");
- refused: "no: <why>" (the op entry's why where it expected the refusal, else the route's);
- some of its calls taken: "part: <word>; no: <why>".

A call is charged to the innermost module open when the route counted it that is one of the
target's call sites (a fused add + norm counts in the norm inside its block's site); a call
charged to none, or beyond its site's profiled count, goes to the sites that still lack calls.
When no kernel finds anything to route (no module, no call scope, no function), no forward runs.
A check that cannot run leaves the static answers and says why in the plan's notes.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autokernel.profiling.routable import target_route
from autokernel.profiling.site_routes import CALL, FUNCTION, MODULE, UNKNOWN
from autokernel.text import error_summary

if TYPE_CHECKING:
    from torch import nn

    from autokernel.integrate.routing import RoutedKernel
    from autokernel.profiling.model_loader import LoadedModel
    from autokernel.profiling.plan import CallSite, Plan, Target

# Words of the op entries' rules that leave open whether a route takes the site's calls.
UNDECIDED = (FUNCTION, UNKNOWN, "")
NOTHING_TAKEN = "no: verify's routes take none of its calls"  # and none said why


def stand_in_kernels(plan: Plan, device: str) -> list[RoutedKernel]:
    """Each target as verify would route its finished kernel, with the op's stock PyTorch path
    as the kernel: the manifest entry verify builds (`manifest_entry`) for a run whose every
    target is done."""
    from autokernel.integrate.custom_ops import KernelOp
    from autokernel.integrate.loader import FinishedRun, manifest_entry
    from autokernel.integrate.routing import RoutedKernel
    from autokernel.loop.state import RunState, TargetState
    from autokernel.ops import get_integration, get_spec

    states = [TargetState(index=index, rank=target.rank, kernel_type=target.kernel_type,
                          tag=tag_of(target), status="done")
              for index, target in enumerate(plan.targets)]
    run = FinishedRun(Path("."), {"model_copy": ""}, plan,
                      RunState(run_tag="plan", branch="", head="", targets=states))
    kernels = []
    for state in states:
        entry = manifest_entry(run, state)
        spec = get_spec(state.kernel_type)
        # The stock PyTorch path runs the calls (SDPA, not the reference's S×S scores: a long
        # sequence's check must not run out of memory); probes still ask the reference.
        op = KernelOp(state.kernel_type, f"autokernel::splice_check_{state.tag}", spec.stock,
                      get_integration(state.kernel_type).backward, device, direct=spec.stock,
                      integration=get_integration(state.kernel_type))
        kernels.append(RoutedKernel.from_manifest(entry, op, spec.reference))
    return kernels


def tag_of(target: Target) -> str:
    """The tag a run gives the target ("01_rmsnorm")."""
    return f"{target.rank:02d}_{target.kernel_type}"


class _Counts:
    """Calls taken and refused per kernel tag and charged module path (None: no site open)."""

    def __init__(self, sites: dict[str, set[str]]) -> None:
        self.sites = sites
        self.open: list[str] = []  # module paths whose forward is running, outermost first
        self.taken: dict[str, Counter[str | None]] = defaultdict(Counter)
        self.refused: dict[str, dict[str | None, Counter[str]]] = defaultdict(
            lambda: defaultdict(Counter))

    def where(self, tag: str) -> str | None:
        mine = self.sites.get(tag, set())
        return next((path for path in reversed(self.open) if path in mine), None)

    def counting(self, stats: Any) -> None:
        """Wrap one RouteStats' counters so that each count is charged to a site."""
        count_call, count_fallback = stats.count_call, stats.count_fallback

        def call() -> None:
            self.taken[stats.tag][self.where(stats.tag)] += 1
            count_call()

        def fallback(reason: str) -> None:
            self.refused[stats.tag][self.where(stats.tag)][reason] += 1
            count_fallback(reason)

        stats.count_call = call
        stats.count_fallback = fallback


@contextlib.contextmanager
def _open_modules(model: nn.Module, counts: _Counts) -> Iterator[None]:
    handles = []

    def hooks(path: str) -> tuple[Callable[..., None], Callable[..., None]]:
        def enter(module: Any, args: Any) -> None:
            counts.open.append(path)

        def leave(module: Any, args: Any, output: Any) -> None:
            if counts.open and counts.open[-1] == path:
                counts.open.pop()

        return enter, leave

    try:
        for path, module in model.named_modules():
            enter, leave = hooks(path)
            try:
                handles.append(module.register_forward_pre_hook(enter))
                handles.append(module.register_forward_hook(leave))
            except (RuntimeError, TypeError):
                continue
        yield
    finally:
        for handle in handles:
            handle.remove()


def check_splices(plan: Plan, loaded: LoadedModel) -> str | None:
    """Rewrite each target's and call site's route from what verify's routes do in one forward
    of `loaded` (see the module doc); returns why the check could not run, or None."""
    if not plan.targets:
        return None
    import torch

    from autokernel.integrate.patch import patch_model
    from autokernel.profiling.model_loader import call_forward

    try:
        kernels = stand_in_kernels(plan, loaded.device)
        patch = patch_model(loaded.model, kernels)
    except Exception as exc:  # an op entry that cannot route this model: the static answers stay
        return f"verify's routes were not asked: {error_summary(exc)}"
    report = patch.report.kernels
    counts = _Counts({tag_of(t): {s.module for s in t.call_sites} for t in plan.targets})
    try:
        if any(s.modules or s.scopes or s.functions for s in report.values()):
            for stats in report.values():
                counts.counting(stats)
            with _open_modules(loaded.model, counts), torch.no_grad():
                call_forward(loaded.model, loaded.inputs)
    except Exception as exc:
        return f"verify's routes were not asked: the patched forward failed: {error_summary(exc)}"
    finally:
        patch.unpatch()
    for target in plan.targets:
        stats = report[tag_of(target)]
        _settle(target, counts.taken[stats.tag], counts.refused[stats.tag], stats)
    return None


def _settle(target: Target, taken: Counter[str | None],
            refused: dict[str | None, Counter[str]], stats: Any) -> None:
    """Each call site's route, from the calls charged to its module, then the target's."""
    by_module: dict[str, list[CallSite]] = defaultdict(list)
    for site in target.call_sites:
        by_module[site.module].append(site)
    # Calls charged to no site, and those beyond a site's profiled count (the profile may place
    # a call in another module than the route counts it in), go to the sites short of their
    # profiled calls, in plan order.
    wanted = {module: sum(s.calls for s in sites) for module, sites in by_module.items()}
    got = {module: min(taken.get(module, 0), wanted[module]) for module in by_module}
    loose = sum(taken.values()) - sum(got.values())
    for module in by_module:
        extra = min(wanted[module] - got[module], loose)
        got[module] += extra
        loose -= extra
    for module, sites in by_module.items():
        reasons = refused.get(module) or refused.get(None) or Counter()
        for site in sites:
            site.route = _site_route(site, got[module], wanted[module], reasons, stats)
    target.route = target_route(site.route for site in target.call_sites)


def _site_route(site: CallSite, taken: int, wanted: int, reasons: Counter[str],
                stats: Any) -> str:
    static = site.route
    if taken == 0:
        if static.startswith("no"):  # the op entry's why, phrased for the plan
            return static
        why = stats.skipped.get(site.module) or (reasons.most_common(1)[0][0] if reasons
                                                 else None)
        return f"no: {why}" if why is not None else NOTHING_TAKEN
    word = _taken_word(site, static, stats)
    if taken < wanted and reasons:
        return f"part: {word}; no: {reasons.most_common(1)[0][0]}"
    return word


def _taken_word(site: CallSite, static: str, stats: Any) -> str:
    """How the call was taken: the op entry's word where it has one, else what the check saw."""
    if static and not static.startswith("no") and static not in UNDECIDED:
        return static
    inside = site.module + "." if site.module else ""
    if any(m == site.module or m.startswith(inside) for m in stats.modules):
        return MODULE
    if stats.functions:
        return FUNCTION.rstrip("?")
    return CALL
