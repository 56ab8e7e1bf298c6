"""What the agent is told before each experiment (`AgentContext`): the target, the machine, the
best kernel so far, the reference implementation and the target's history from results.tsv."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from autokernel.agents.base import AgentContext, Attempt
from autokernel.harness.result import BenchResult
from autokernel.gpu.resources import resources_enabled
from autokernel.loop.config import LoopConfig
from autokernel.loop.hardware import HardwareBrief, gpu_facts
from autokernel.loop.lessons import lessons_for_prompt
from autokernel.loop.measure import speedups_text
from autokernel.loop.results import ResultRow, ResultsLog
from autokernel.loop.rows import attempt_from_row, row_cells
from autokernel.loop.state import TargetState
from autokernel.loop.workspace import KERNEL_FILE, Workspace
from autokernel.profiling.plan import Plan


class Briefing:
    """Builds each experiment's `AgentContext`; keeps every target's history in memory, read
    from results.tsv once and extended as rows are written."""

    def __init__(self, workspace: Workspace, plan: Plan, config: LoopConfig,
                 best_source: Callable[[TargetState], str] | None = None) -> None:
        self.ws = workspace
        self.plan = plan
        self.config = config
        # The target's best kernel. By default kernel.py, which at rest is the current target's
        # best; targets optimized in parallel (autokernel.parallel) read it from its commit.
        self.best_source = best_source or (lambda target: workspace.read_kernel())
        self._history: dict[int, list[Attempt]] = {}
        self._reference_sources: dict[str, str] = {}
        # The tuner never reads the prompt: it does not pay for compiling each kernel.
        self.hardware = HardwareBrief(
            compile_resources=config.agent != "tuner" and resources_enabled(),
            cache_dir=workspace.cache_dir / "kernel-resources")

    def context(self, target: TargetState, next_experiment: int,
                results: ResultsLog) -> AgentContext:
        return AgentContext(
            target=self.plan.targets[target.index],
            device=self.config.device,
            gpu_summary=self.gpu_summary(target, self.history_of(target, results)),
            best_source=self.best_source(target),
            reference_source=self.reference_source(target.kernel_type),
            history=list(self.history_of(target, results)),
            best=BenchResult.from_dict(target.best_result) if target.best_result else None,
            experiment=next_experiment,
            workspace=str(self.ws.root),
            lessons=lessons_for_prompt(self.ws.lessons_path(target.tag)),
        )

    def history_of(self, target: TargetState, results: ResultsLog) -> list[Attempt]:
        if target.index not in self._history:
            self._history[target.index] = [
                attempt_from_row(r) for r in results.rows() if r.get("tag") == target.tag
            ]
        return self._history[target.index]

    def remember(self, target: TargetState, row: ResultRow, results: ResultsLog) -> None:
        """Add a just-written row to the target's history (once, also after a resume)."""
        history = self.history_of(target, results)
        if not history or history[-1].experiment != row.experiment:
            history.append(attempt_from_row(row_cells(row)))

    def reference_source(self, kernel_type: str) -> str:
        if kernel_type not in self._reference_sources:
            from autokernel.ops import get_spec

            function = get_spec(kernel_type).reference
            self._reference_sources[kernel_type] = inspect.getsource(function)
        return self._reference_sources[kernel_type]

    def gpu_summary(self, target: TargetState, history: list[Attempt] | None = None) -> str:
        """Where the best sits, then the hardware block (autokernel.loop.hardware)."""
        where = self.plan.gpu or ("CPU (Triton interpreter; timings not meaningful)"
                                  if self.config.device == "cpu" else "unknown GPU")
        best = target.best
        if best is None or best.latency_us is None:
            headline = f"{where}; no passing kernel yet"
        else:
            peak = best.pct_peak_best_known
            basis = "measured ceiling" if best.pct_peak_measured is not None else "datasheet"
            at_peak = f", {peak:.0f}% of the {basis} roofline" if peak is not None else ""
            headline = f"{where}; best so far {speedups_text(best)}{at_peak}"
        return headline + "\n" + self.hardware_block(target, history or [])

    def hardware_block(self, target: TargetState, history: list[Attempt]) -> str:
        planned = self.plan.targets[target.index]
        verdict = BenchResult.from_dict(target.best_result) if target.best_result else None
        on_gpu = self.config.device != "cpu"
        name = (verdict.gpu if verdict is not None and on_gpu else None) or self.plan.gpu
        return self.hardware.render(
            device=self.config.device, facts=gpu_facts(self.config.device, name),
            kernel_type=planned.kernel_type, shape=planned.bench_shape, dtype=planned.dtype,
            best=verdict, best_source=self.best_source(target), candidate=self._candidate(history))

    def _candidate(self, history: list[Attempt]) -> tuple[str, str] | None:
        """The latest experiment's kernel when it was not kept and its attempt was saved."""
        if not history or history[-1].status in ("keep", "baseline"):
            return None
        last = history[-1]
        saved = self.ws.attempt_dir(last.experiment) / KERNEL_FILE
        if not saved.is_file():
            return None
        return f"latest candidate #{last.experiment} ({last.status})", saved.read_text()
