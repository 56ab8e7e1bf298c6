"""What one experiment leaves behind in words: its results.tsv row, its commit message, and the
fields of the agent's proposal that both carry (journaled in state.json until the row is written).
"""

from __future__ import annotations

import json
from typing import Any

from autokernel.agents.base import Attempt, Proposal
from autokernel.harness.result import BenchResult
from autokernel.kernelfile import KernelFileError, parse_kernel_source
from autokernel.loop.keep_figure import decision_text
from autokernel.loop.measure import measure
from autokernel.loop.results import COLUMNS, ResultRow, sanitize
from autokernel.loop.state import InFlight, TargetState
from autokernel.profiling.plan import Target

Weights = dict[tuple[int, ...], float]


def proposal_fields(proposal: Proposal, agent_name: str) -> dict[str, Any]:
    """The proposal's fields that the journal keeps and the row records."""
    return {
        "sweep": bool(proposal.sweep),
        "description": sanitize(proposal.description or "(no description)", 300),
        "agent": proposal.agent or agent_name,
        "hypothesis": sanitize(proposal.hypothesis, 300),
        "lesson": sanitize(proposal.lesson, 300),
        "input_tokens": proposal.input_tokens,
        "output_tokens": proposal.output_tokens,
        "cost_usd": proposal.cost_usd,
    }


def fields_of_flight(flight: InFlight) -> dict[str, Any]:
    """The same fields, read back from the journal (after a resume, no proposal is left)."""
    return {
        "sweep": flight.sweep,
        "description": flight.description,
        "agent": flight.agent,
        "hypothesis": flight.hypothesis,
        "lesson": flight.lesson,
        "input_tokens": flight.input_tokens,
        "output_tokens": flight.output_tokens,
        "cost_usd": flight.cost_usd,
    }


def tunables_of(source: str) -> dict[str, Any]:
    try:
        return dict(parse_kernel_source(source).tunables)
    except KernelFileError:
        return {}


def commit_message(target: TargetState, flight: InFlight, result: BenchResult) -> str:
    """"exp 7 01_softmax: BLOCK 256 — keep: 1.134× the best (95% CI 1.052–1.308×)": the keep
    rule's own figure (`keep_figure.decision_text`); the baseline's latency and speedups at its
    primary shape, labelled."""
    vs_best = flight.vs_best or [None, None, None]
    primary = result.timings[0].shape if result.timings else []
    figures = decision_text({
        "status": flight.verdict, "correctness": result.status.value,
        "reason": flight.verdict_reason, "vs_best": vs_best[0], "vs_best_lo": vs_best[1],
        "vs_best_hi": vs_best[2], "latency_us": result.latency_us,
        "shape": "x".join(str(d) for d in primary),
        "speedup_vs_pytorch": result.speedup_vs_eager,
        "speedup_vs_compile": result.speedup_vs_compile,
    })
    if not result.passed:
        figures = f"{result.status.value}: {result.reason}"
    verdict = "" if flight.baseline else f"{flight.verdict}: "
    note = " [cpu interpreter timing]" if not result.timing_meaningful else ""
    return sanitize(f"exp {flight.experiment} {target.tag}: {flight.description} — "
                    f"{verdict}{figures}{note}", 400)


def result_row(target: TargetState, plan_target: Target, experiment: int, fields: dict[str, Any],
               result: BenchResult | None, status: str, reason: str, *, commit: str,
               seconds: float, stage: str, tunables: dict[str, Any], weights: Weights,
               vs_best: list[float] | None = None, gpu: str = "") -> ResultRow:
    """The experiment's results.tsv row."""
    objective = None
    if result is not None and result.passed:
        objective = measure(result, experiment, commit, weights).latency_us
    return ResultRow(
        experiment=experiment,
        tag=target.tag,
        kernel_type=target.kernel_type,
        status=status,
        phase=ResultRow.phase_of(status, bool(fields.get("sweep")), judged=result is not None),
        # ERROR: no kernel to judge (the agent produced none); RightNow's tools count it failed.
        correctness=result.status.value if result is not None else "ERROR",
        description=fields.get("description", ""),
        target_rank=target.rank,
        shape="x".join(str(d) for d in plan_target.bench_shape),
        dtype=plan_target.dtype,
        agent=fields.get("agent", ""),
        throughput_tflops=result.tflops if result else None,
        latency_us=result.latency_us if result else None,
        pct_peak=result.pct_peak_datasheet if result else None,
        speedup_vs_pytorch=result.speedup_vs_eager if result else None,
        peak_vram_mb=result.peak_vram_mb if result else None,
        speedup_vs_compile=result.speedup_vs_compile if result else None,
        pct_peak_measured=result.pct_peak_measured if result else None,
        objective_us=objective,
        vs_best=vs_best[0] if vs_best else None,
        vs_best_lo=vs_best[1] if vs_best else None,
        vs_best_hi=vs_best[2] if vs_best else None,
        launch_us=result.launch_us if result else None,
        eager_launch_us=result.eager_launch_us if result else None,
        seconds=round(seconds, 3),
        harness_seconds=result.harness_seconds if result else None,
        commit=commit,
        input_tokens=int(fields.get("input_tokens") or 0),
        output_tokens=int(fields.get("output_tokens") or 0),
        cost_usd=fields.get("cost_usd"),
        stage=stage,
        reason=sanitize(reason),
        tunables=tunables,
        launch_digest=(result.launch_digest or "") if result else "",
        hypothesis=sanitize(fields.get("hypothesis") or "", 300),
        gpu=gpu,
    )


def row_cells(row: ResultRow) -> dict[str, str]:
    """The row as results.tsv holds it, keyed by column."""
    cells = row.to_line().rstrip("\n").split("\t")
    return dict(zip(COLUMNS, cells))


def attempt_from_row(row: dict[str, str]) -> Attempt:
    """A results.tsv row as the agent sees it in its history."""

    def number(key: str) -> float | None:
        text = row.get(key) or ""
        return float(text) if text else None

    objective = number("objective_us")
    return Attempt(
        experiment=int(row["experiment"]),
        description=row.get("description", ""),
        status=row.get("status", ""),
        latency_us=objective if objective is not None else number("latency_us"),
        speedup_vs_eager=number("speedup_vs_pytorch"),
        speedup_vs_compile=number("speedup_vs_compile"),
        stage=row.get("stage") or None,
        reason=row.get("reason", ""),
        tunables=json.loads(row["tunables"]) if row.get("tunables") else {},
        launch_digest=row.get("launch_digest") or "",
        hypothesis=row.get("hypothesis") or "",
    )
