"""One candidate's verdict: the harness's (`Bench`) and the keep rule's (`autokernel.loop.keep`).

The bench interface is explicit: the loop passes every option in `BENCH_OPTIONS`, and a bench that
does not take one of them is refused when the run starts, rather than having options dropped
silently (a misspelled option would otherwise be ignored for a whole night).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from autokernel.harness.result import BenchResult, Status
from autokernel.loop.config import LoopConfig
from autokernel.loop.keep import KeepVerdict, verdict_for
from autokernel.loop.measure import measure, shape_weights, timed_shapes
from autokernel.loop.state import InFlight, TargetState
from autokernel.loop.workspace import Workspace
from autokernel.profiling.plan import Plan, Target

# Every keyword option the loop passes to the bench, each time (documented by
# `autokernel.harness.runner.run_bench`).
BENCH_OPTIONS = ("device", "shapes", "dtypes", "correctness_dtypes", "model_shapes", "params",
                 "timeout_s", "cache_dir", "quick", "timing_budget_s", "incumbent", "min_gain")


class Bench(Protocol):
    def __call__(self, kernel_path: Path, *, device: str, shapes: list[list[int]],
                 dtypes: list[str], correctness_dtypes: list[str] | None,
                 model_shapes: list[list[int]], params: dict[str, Any], timeout_s: float,
                 cache_dir: Path, quick: bool, timing_budget_s: float, incumbent: Path | None,
                 min_gain: float) -> BenchResult: ...


class BenchInterfaceError(TypeError):
    """The bench function does not take the options the loop passes."""


def default_bench() -> Bench:
    from autokernel.harness.runner import run_bench

    return run_bench


def check_bench(bench: Callable[..., BenchResult]) -> None:
    """Refuse a bench that cannot take a kernel path and every one of `BENCH_OPTIONS`."""
    try:
        signature = inspect.signature(bench)
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to check before the first call
    try:
        signature.bind(Path("kernel.py"), **{name: None for name in BENCH_OPTIONS})
    except TypeError as exc:
        raise BenchInterfaceError(
            f"the bench {getattr(bench, '__name__', bench)!r} does not take the loop's options "
            f"({', '.join(BENCH_OPTIONS)}): {exc}") from None


class Judge:
    """Runs the harness on kernel.py for one target and applies the keep rule."""

    def __init__(self, workspace: Workspace, plan: Plan, config: LoopConfig,
                 bench: Callable[..., BenchResult] | None,
                 best_source: Callable[[TargetState], str],
                 harness_cache: Path | None = None) -> None:
        self.ws = workspace
        self.plan = plan
        self.config = config
        self.best_source = best_source
        # The harness's compile caches and torch.compile baselines: the workspace's by default;
        # the workers of one machine share one (autokernel.parallel).
        self.harness_cache = harness_cache or workspace.cache_dir / "harness"
        self._bench_fn = bench
        if bench is not None:
            check_bench(bench)

    def plan_target(self, target: TargetState) -> Target:
        return self.plan.targets[target.index]

    def timed_shapes(self, target: TargetState) -> list[list[int]]:
        return timed_shapes(self.plan_target(target), self.config.max_shapes)

    def weights(self, target: TargetState) -> dict[tuple[int, ...], float]:
        return shape_weights(self.plan_target(target), self.timed_shapes(target))

    def verdict(self, target: TargetState, flight: InFlight) -> tuple[BenchResult, KeepVerdict]:
        """The harness's verdict and the keep rule's. A candidate is first screened with the
        quick shape sweep (every detector, fewer shapes to compile for); only one the keep rule
        would keep, or whose paired estimate clears the margin, pays for the full sweep, which
        then decides, with fresh paired timings."""
        weights = self.weights(target)
        if flight.baseline:
            result = self._bench(target, baseline=True)
            return result, KeepVerdict("baseline", result.reason if not result.passed else "")
        screen = self.config.screen and not self.config.harness_quick
        result = self._bench(target, quick=screen)
        decision = verdict_for(result, measure(result, flight.experiment, "", weights),
                               target.best, self.config.min_keep_margin, weights)
        if not screen or not result.passed:
            return result, decision
        # A screen times fewer rounds, so a real but small win can miss the bound there: any
        # candidate whose estimate clears the margin gets the full harness's verdict too.
        promising = (decision.vs_best is not None
                     and decision.vs_best.estimate > 1.0 + self.config.min_keep_margin)
        if decision.status != "keep" and not promising:
            return result, KeepVerdict(decision.status, decision.reason + " [quick screen]",
                                       decision.vs_best)
        screened_s = result.harness_seconds or 0.0
        result = self._bench(target)
        if result.harness_seconds is not None:
            result.harness_seconds = round(result.harness_seconds + screened_s, 3)
        decision = verdict_for(result, measure(result, flight.experiment, "", weights),
                               target.best, self.config.min_keep_margin, weights)
        return result, KeepVerdict(decision.status, decision.reason + " [promising on the quick "
                                   "screen; this verdict is the full harness's]", decision.vs_best)

    def _bench(self, target: TargetState, *, baseline: bool = False,
               quick: bool = False) -> BenchResult:
        plan_target = self.plan_target(target)
        timeout = self.config.bench_timeout_s
        if baseline:
            # The first run of a target also compiles and caches the torch.compile baselines.
            timeout = max(3 * timeout, 180.0)
        if self._bench_fn is None:
            self._bench_fn = default_bench()
            check_bench(self._bench_fn)
        cache = self.harness_cache
        cache.mkdir(parents=True, exist_ok=True)
        try:
            return self._bench_fn(
                self.ws.kernel_path,
                device=self.config.device,
                shapes=self.timed_shapes(target),
                dtypes=[plan_target.dtype],
                # Correct at the dtype the model runs (each extra dtype is another compile per
                # candidate); None: every dtype the op supports.
                correctness_dtypes=None if self.config.check_all_dtypes else [plan_target.dtype],
                model_shapes=[list(s) for s in plan_target.shapes],
                params=dict(plan_target.params),
                timeout_s=timeout,
                cache_dir=cache,
                quick=quick or self.config.harness_quick,
                timing_budget_s=self.config.timing_budget_s,
                incumbent=None if baseline else self._incumbent_file(target),
                min_gain=self.config.min_keep_margin,
            )
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # a harness failure is recorded, never fatal to the run
            return BenchResult(status=Status.CRASH, stage="harness",
                               reason=f"the harness failed: {type(exc).__name__}: {exc}",
                               kernel_type=target.kernel_type, device=self.config.device)

    def _incumbent_file(self, target: TargetState) -> Path | None:
        """The target's best kernel, for the harness to time in the same rounds as the
        candidate; None while nothing passes."""
        if target.best is None or not target.best.passed:
            return None
        path = self.ws.cache_dir / "incumbent.py"
        path.write_text(self.best_source(target), encoding="utf-8")
        return path
