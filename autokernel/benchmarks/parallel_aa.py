"""One GPU: does `--gpus 1` (the multi-GPU code path, one worker process) decide as today's loop,
and as fast? An A/A check, with today's loop run twice for the noise reference.

    python -m autokernel.benchmarks parallel-aa [--model M] [--top 2] [--experiments 6]
        [--out DIR] [--no-reference]

One profile (`autokernel profile --json`) gives every run the same targets; then, each with the
tuner, the same seed and the same experiments per target:

    serial    today's path (no --gpus: the harness in the loop's own process)
    gpus1     --gpus 1: the same loop handing each experiment to one worker process
    serial2   today's path again (skip with --no-reference): what timing noise alone changes

Printed, and written to DIR/aa.json and DIR/aa.md: each run's experiments, keeps and rate
(experiments an hour of active time, worker start-up included, and its steady rate), the
decisions gpus1 shares with serial (the same experiment, description and keep/revert, in order,
up to the first that differs) against what serial2 shares with serial.

PASS when gpus1 shares at least as many decisions with serial as serial2 does (on a GPU a keep
near the margin can flip from noise alone: then both diverge at a noisy decision) and its steady
rate is no more than 5% below serial's (the rate change is printed either way; compare it with
serial2's to see the noise). Exit status 0 on PASS, 1 otherwise.

Sized for one command of at most 10 minutes on an H100/H200 with the defaults (tiny_llama, 2
targets, 6 experiments each and a baseline: about 2 min a run, most of it the baselines).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from autokernel.benchmarks.parallel_runs import ROOT, autokernel, read_run, same_prefix
from autokernel.benchmarks.record import environment

RATE_TOLERANCE = 0.05


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(ROOT / "examples" / "models" / "tiny_llama.py"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--top", type=int, default=2)
    parser.add_argument("--experiments", type=int, default=6, help="per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "autokernel_runs" / "parallel-aa")
    parser.add_argument("--no-reference", action="store_true", help="skip serial2")
    args = parser.parse_args(argv)

    out = args.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    log = out / "aa.log"
    plan = out / "plan.json"
    code, _ = autokernel(["profile", args.model, "--device", args.device, "--json", str(plan)],
                         log)
    if code != 0:
        print(f"profiling failed ({code}); see {log}")
        return 1
    common = ["--plan", str(plan), "--device", args.device, "--agent", "tuner", "--seed",
              str(args.seed), "--top", str(args.top), "--max-experiments-per-target",
              str(args.experiments), "--hours", "1", "--no-live", "--yes"]
    runs = {"serial": [], "gpus1": ["--gpus", "1"]}
    if not args.no_reference:
        runs["serial2"] = []
    figures = {}
    for name, extra in runs.items():
        code, wall = autokernel(["run", args.model, *common, *extra, "--out", str(out / name)],
                                log)
        if code != 0:
            print(f"{name} failed ({code}); see {log}")
            return 1
        figures[name] = read_run(out / name, wall)
        f = figures[name]
        print(f"{name}: {f.experiments} experiments, "
              f"{sum(r['status'] == 'keep' for r in f.rows)} kept, {f.per_hour:.0f} an hour "
              f"({f.steady_per_hour:.0f} steady) in {f.run_seconds:.0f} s active")

    serial = figures["serial"].decisions()
    shared = same_prefix(serial, figures["gpus1"].decisions())
    reference = same_prefix(serial, figures["serial2"].decisions()) if "serial2" in figures \
        else None
    rate = figures["gpus1"].steady_per_hour / figures["serial"].steady_per_hour - 1.0
    noise = (figures["serial2"].steady_per_hour / figures["serial"].steady_per_hour - 1.0
             if "serial2" in figures else None)
    decisions_ok = shared == len(serial) or (reference is not None and shared >= reference)
    passed = decisions_ok and rate >= -RATE_TOLERANCE  # faster is no defect
    result = {
        "machine": environment("parallel-aa", list(argv or [])), "model": args.model,
        "top": args.top,
        "experiments_per_target": args.experiments, "seed": args.seed,
        "runs": {name: {"experiments": f.experiments, "per_hour": round(f.per_hour, 1),
                        "steady_per_hour": round(f.steady_per_hour, 1),
                        "run_seconds": round(f.run_seconds, 1),
                        "wall_seconds": round(f.wall_seconds, 1),
                        "keeps": [r["experiment"] for r in f.rows if r["status"] == "keep"]}
                 for name, f in figures.items()},
        "shared_decisions": {"gpus1": shared, "serial2": reference, "of": len(serial)},
        "steady_rate_change": round(rate, 4),
        "steady_rate_change_serial2": None if noise is None else round(noise, 4),
        "passed": passed,
    }
    (out / "aa.json").write_text(json.dumps(result, indent=1) + "\n")
    gpu = (result["machine"].get("gpu") or {}).get("name") or args.device
    lines = [
        f"# --gpus 1 against today's loop (A/A), {gpu}", "",
        "| run | experiments | kept | an hour | steady an hour | active s |",
        "|---|---|---|---|---|---|",
        *(f"| {n} | {r['experiments']} | {len(r['keeps'])} | {r['per_hour']} | "
          f"{r['steady_per_hour']} | {r['run_seconds']} |" for n, r in result["runs"].items()),
        "", f"Decisions shared with serial, in order: gpus1 {shared} of {len(serial)}"
        + (f", serial2 {reference}" if reference is not None else "")
        + f". Steady rate of gpus1 vs serial: {rate:+.1%}"
        + (f" (serial2 vs serial: {noise:+.1%})" if noise is not None else "")
        + f". {'PASS' if passed else 'FAIL'}.",
    ]
    (out / "aa.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-1:]))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
