"""Summarize a tuner run's workspace as Markdown: per-target speedups, throughput of the loop.

    python -m autokernel.benchmarks tuner-run-summary RUN_DIR > docs/benchmarks/tuner-run.md

Reads only results.tsv, state.json, run.json and git (standard library), so it runs on the GPU
machine as it is. Figures:

- per target: baseline (the starter, experiment 0) and best kept latency at the primary profiled
  shape, speedup of the best against eager PyTorch and torch.compile (the harness's interleaved
  timings of the same experiment), % of the measured ceiling (for memory-bound ops: of the
  measured device-to-device copy bandwidth), experiments, keeps, stop rule;
- the loop: experiments per hour of active run time, median and mean harness seconds per
  experiment and the loop's own overhead (experiment wall time minus harness time);
- where the harness spends them: the median seconds of each worker phase over the experiments
  after the baselines (from verdicts/NNNN.json), and the time outside the worker (startup).
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

from autokernel.versions import source_commit


def _float(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def _fmt(value: float | None, pattern: str) -> str:
    return "–" if value is None else pattern.format(value)


def summarize(run_dir: Path) -> str:
    rows = list(csv.DictReader((run_dir / "results.tsv").open(), delimiter="\t",
                               quoting=csv.QUOTE_NONE))
    state = json.loads((run_dir / "state.json").read_text())
    run = json.loads((run_dir / "run.json").read_text())
    head = subprocess.run(["git", "-C", str(run_dir), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    repo_commit = source_commit()

    out = [f"# Tuner run: {run['model']} ({run['config']['dtype']}) on {run.get('gpu') or 'cpu'}",
           ""]
    versions = ", ".join(f"{k} {v}" for k, v in run.get("versions", {}).items())
    out += [f"- autokernel commit {repo_commit}; {versions}",
            f"- command: `{run.get('command', '')}`",
            f"- agent: {run['config']['agent']}; stop: {state.get('stop_reason', '')}",
            f"- workspace branch {state['branch']} at {head}; {len(rows)} experiments "
            f"in {state['run_seconds'] / 60:.1f} min of active run time", ""]

    out += ["| target | baseline µs | best µs | best × eager | best × compile | % measured "
            "ceiling | % datasheet | experiments | kept | stop |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for target in state["targets"]:
        mine = [r for r in rows if r["tag"] == target["tag"]]
        baseline = next((r for r in mine if r["status"] == "baseline"), None)
        kept = [r for r in mine
                if r["status"] in ("baseline", "keep") and r["correctness"] == "PASS"]
        best = kept[-1] if kept else {}  # each keep beats every earlier kept row

        def cell(row: dict[str, str] | None, column: str, pattern: str) -> str:
            return _fmt(_float(row.get(column)) if row else None, pattern)

        stop = target.get("stop_reason") or target["status"]
        out.append(
            f"| {target['tag']} | {cell(baseline, 'latency_us', '{:.2f}')} "
            f"| {cell(best, 'latency_us', '{:.2f}')} "
            f"| {cell(best, 'speedup_vs_pytorch', '{:.2f}×')} "
            f"| {cell(best, 'speedup_vs_compile', '{:.2f}×')} "
            f"| {cell(best, 'pct_peak_measured', '{:.0f}%')} | {cell(best, 'pct_peak', '{:.0f}%')} "
            f"| {target['experiments']} | {target['keeps']} | {stop} |"
        )
    out.append("")

    harness = [h for h in (_float(r["harness_seconds"]) for r in rows) if h is not None]
    walls = [w for w in (_float(r["seconds"]) for r in rows) if w is not None]
    overhead = [_float(r["seconds"]) - _float(r["harness_seconds"]) for r in rows
                if _float(r["seconds"]) is not None and _float(r["harness_seconds"]) is not None]
    hours = state["run_seconds"] / 3600
    figures = []
    if hours:
        figures.append(("experiments per hour (active time)", f"{len(rows) / hours:.0f}"))
    if harness:
        figures.append(("harness seconds per experiment, median / mean",
                        f"{statistics.median(harness):.2f} / {statistics.mean(harness):.2f}"))
    if walls:
        figures.append(("experiment wall seconds, median / mean",
                        f"{statistics.median(walls):.2f} / {statistics.mean(walls):.2f}"))
    if overhead:
        figures.append(("loop overhead per experiment (wall − harness), median",
                        f"{statistics.median(overhead):.2f} s"))
    phases: dict[str, list[float]] = {}
    for row in rows:
        path = run_dir / "verdicts" / f"{int(row['experiment']):04d}.json"
        if row["status"] == "baseline" or not path.is_file():
            continue
        verdict = json.loads(path.read_text())
        seconds = dict(verdict.get("phase_seconds") or {})
        if verdict.get("harness_seconds") is not None and seconds:
            seconds["outside the worker"] = verdict["harness_seconds"] - sum(seconds.values())
        for name, value in seconds.items():
            phases.setdefault(name, []).append(value)
    if phases:
        figures.append(("harness phases after the baselines, median s", ", ".join(
            f"{name} {statistics.median(values):.2f}" for name, values in phases.items())))
    counts = {status: sum(r["status"] == status for r in rows) for status in
              sorted({r["status"] for r in rows})}
    figures.append(("experiments by status", ", ".join(f"{k} {v}" for k, v in counts.items())))
    out += ["| loop figure | value |", "|---|---|"]
    out += [f"| {name} | {value} |" for name, value in figures]
    out.append("")
    out += ["Speedups are the harness's: the same experiment times the kernel, eager PyTorch and "
            "torch.compile interleaved at the target's primary profiled shape and dtype. "
            "Where a memory-bound target is below torch.compile or below 80% of the measured "
            "copy bandwidth, see its rows in results.tsv for what was tried.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m autokernel.benchmarks tuner-run-summary RUN_DIR", file=sys.stderr)
        return 2
    print(summarize(Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
