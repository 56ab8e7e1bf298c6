"""Experiments an hour against GPUs, in one call: `autokernel run --gpus N` for each N, then
`autokernel kernelbench --gpus N` for each N, on the same plan and the same problems.

    python -m autokernel.benchmarks parallel-scaling [--gpus 1,2,4] [--minutes 5] [--model M]
        [--top 8]
        [--kernelbench examples/kernelbench] [--problem-minutes 2] [--out DIR]

For each N (skipped where the machine has fewer GPUs; on --device cpu, interpreter workers):
a run of `--minutes` on the model's plan (profiled once, so every N has the same targets; --top
at least the largest N, so that every GPU gets a target), counted from its results.tsv and
state.json: experiments, experiments an hour of active time (worker start-up included), the
steady rate, and per GPU its experiments, rate and idle share (.cache/gpus.json). Then the
kernelbench set with each N: problems an hour. The speed-up over N=1 is printed; everything
goes to DIR/scaling.json and DIR/scaling.md.

Where a command may run at most 10 minutes, give each N its own call (`--gpus 4 --no-kernelbench`
and so on); the figures of earlier calls in DIR are kept and the table shows them all.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from autokernel.benchmarks.parallel_runs import ROOT, autokernel, read_run
from autokernel.benchmarks.record import environment


def available_gpus(device: str) -> int:
    if device == "cpu":
        import os

        return os.cpu_count() or 1
    import torch

    return torch.cuda.device_count()


def run_scaling(args: argparse.Namespace, out: Path, counts: list[int], log: Path,
                results: dict) -> None:
    plan = out / "plan.json"
    if not plan.is_file():
        code, _ = autokernel(["profile", args.model, "--device", args.device, "--json",
                              str(plan)], log)
        if code != 0:
            raise SystemExit(f"profiling failed ({code}); see {log}")
    for n in counts:
        directory = out / f"run-gpus{n}"
        shutil.rmtree(directory, ignore_errors=True)
        code, wall = autokernel(
            ["run", args.model, "--plan", str(plan), "--device", args.device, "--agent",
             "tuner", "--top", str(max(args.top, max(counts))), "--hours",
             f"{args.minutes / 60:.4f}", "--gpus", str(n), "--out", str(directory),
             "--no-live", "--yes"], log, timeout_s=args.minutes * 60 + 300)
        if code not in (0, 130):
            print(f"run --gpus {n} failed ({code}); see {log}")
            continue
        f = read_run(directory, wall)
        results["run"][str(n)] = {
            "experiments": f.experiments, "run_seconds": round(f.run_seconds, 1),
            "per_hour": round(f.per_hour, 1), "steady_per_hour": round(f.steady_per_hour, 1),
            "per_gpu": {label: {k: w.get(k) for k in ("device_name", "experiments",
                                                      "busy_seconds", "idle_seconds", "lost")}
                        for label, w in f.per_gpu().items()},
        }
        print(f"run --gpus {n}: {f.experiments} experiments, {f.per_hour:.0f} an hour "
              f"({f.steady_per_hour:.0f} steady)")


def kernelbench_scaling(args: argparse.Namespace, out: Path, counts: list[int], log: Path,
                        results: dict) -> None:
    for n in counts:
        directory = out / f"kernelbench-gpus{n}"
        shutil.rmtree(directory, ignore_errors=True)
        code, wall = autokernel(
            ["kernelbench", str(args.kernelbench), "--device", args.device, "--agent", "tuner",
             "--minutes-per-problem", str(args.problem_minutes), "--gpus", str(n), "--out",
             str(directory)], log)
        try:
            records = json.loads((directory / "results.json").read_text())["problems"]
        except (OSError, ValueError, KeyError):
            print(f"kernelbench --gpus {n} failed ({code}); see {log}")
            continue
        results["kernelbench"][str(n)] = {"problems": len(records), "wall_seconds": round(wall, 1),
                                          "per_hour": round(len(records) / wall * 3600, 2)}
        print(f"kernelbench --gpus {n}: {len(records)} problems in {wall:.0f} s")


def idle_share(worker: dict) -> float:
    total = (worker.get("idle_seconds") or 0.0) + (worker.get("busy_seconds") or 0.0)
    return (worker.get("idle_seconds") or 0.0) / total if total else 0.0


def table(results: dict) -> list[str]:
    gpu = (results["machine"].get("gpu") or {}).get("name") or "cpu"
    lines = [f"# Experiments an hour against GPUs ({gpu})", ""]
    runs = results["run"]
    if runs:
        base = runs.get("1", {}).get("per_hour")
        lines += ["| run --gpus | experiments | an hour | steady | × --gpus 1 | idle per GPU |",
                  "|---|---|---|---|---|---|"]
        for n, r in sorted(runs.items(), key=lambda kv: int(kv[0])):
            idle = ", ".join(f"{label} {idle_share(w):.0%}" for label, w in r["per_gpu"].items())
            ratio = f"{r['per_hour'] / base:.2f}" if base else "–"
            lines.append(f"| {n} | {r['experiments']} | {r['per_hour']} | "
                         f"{r['steady_per_hour']} | {ratio} | {idle} |")
    sets = results["kernelbench"]
    if sets:
        base = sets.get("1", {}).get("per_hour")
        lines += ["", "| kernelbench --gpus | problems | wall s | problems an hour | × --gpus 1 |",
                  "|---|---|---|---|---|"]
        for n, r in sorted(sets.items(), key=lambda kv: int(kv[0])):
            ratio = f"{r['per_hour'] / base:.2f}" if base else "–"
            lines.append(f"| {n} | {r['problems']} | {r['wall_seconds']} | {r['per_hour']} | "
                         f"{ratio} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default="1,2,4", help="worker counts, e.g. 1,2,4,8")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default=str(ROOT / "examples" / "models" /
                                               "mistral_decoder.py"))
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=5.0, help="each run's budget")
    parser.add_argument("--kernelbench", type=Path, default=ROOT / "examples" / "kernelbench")
    parser.add_argument("--problem-minutes", type=float, default=2.0)
    parser.add_argument("--no-run", action="store_true")
    parser.add_argument("--no-kernelbench", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "autokernel_runs" / "scaling")
    args = parser.parse_args(argv)

    have = available_gpus(args.device)
    counts = [n for n in (int(x) for x in args.gpus.split(",")) if n <= have]
    skipped = [x for x in args.gpus.split(",") if int(x) > have]
    if skipped:
        print(f"skipped --gpus {', '.join(skipped)}: this machine has {have}")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    log = out / "scaling.log"
    saved = out / "scaling.json"
    results = json.loads(saved.read_text()) if saved.is_file() else {"run": {}, "kernelbench": {}}
    results["machine"] = environment("parallel-scaling", list(argv or []))
    if not args.no_run:
        run_scaling(args, out, counts, log, results)
    if not args.no_kernelbench:
        kernelbench_scaling(args, out, counts, log, results)
    saved.write_text(json.dumps(results, indent=1) + "\n")
    lines = table(results)
    (out / "scaling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
