"""Seeded vs unseeded tuner sweeps on the H100 config-sweep table, offline (no GPU, no API).

    python -m autokernel.benchmarks tuner-seeding [--seeds 30] [--out docs/benchmarks]
                                                    [--hybrid-stops]

Harness calls until a configuration within 1% of each structure's best is measured, answered from
docs/benchmarks/config-sweep-h100/sweep.json (autokernel.agents.bench). Writes
tuner-seeding-<commit>.md and .json under --out and prints the markdown. --hybrid-stops ends each
sweep where the hybrid agent would (its cap, and each arm's stall or patience rule) and writes
tuner-seeding-<commit>-hybrid-stops.*.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

from autokernel.agents.bench.lookup import DEFAULT_TABLE, load_table, sweep_scenario
from autokernel.agents.bench.seeding import (
    ARMS, MAX_SWEEP_EXPERIMENTS, STALL_AFTER, STALL_GAIN, UNSEEDED_PATIENCE, compare,
)
from autokernel.files import atomic_write_text
from autokernel.versions import source_commit


def _markdown(report: dict, commit: str) -> str:
    arms = list(report["arms"])
    lines = [
        "# Seeded vs unseeded tuner sweeps (offline, H100 lookup table)", "",
        f"- commit: {commit}; date: {report['date']}; seeds: {report['seeds'][0]}.."
        f"{report['seeds'][-1]} ({len(report['seeds'])} per arm and target)",
        f"- data: `{report['table']}` (H100 80GB HBM3, do_bench, measured at commit 0de5c0e: "
        "see its sweep.md); no GPU was used here",
        "- method: `python -m autokernel.benchmarks tuner-seeding` "
        "(autokernel.agents.bench.seeding "
        "says what is counted); calls = every harness call of the sweep, the starter's "
        "included, the same count for every arm, until one "
        f"within {report['tolerance']:.0%} of the structure's best is measured",
        *(["- hybrid stops: a sweep ends where the hybrid agent ends it (at most "
            f"{MAX_SWEEP_EXPERIMENTS} experiments after the starter; seeded arms: "
            f"{STALL_AFTER} measurements without a {STALL_GAIN:.0%} gain; unseeded: "
            f"{UNSEEDED_PATIENCE} without a faster one, the rule before the seeding); one "
            "ended before the goal counts as every configuration of the table"]
           if report.get("hybrid_stops") else []),
        "", "| target | structure | configs | prior | " + " | ".join(
            f"{a} median / mean (reached)" for a in arms) + " |",
        "|---|---|---|---|" + "---|" * len(arms)]
    for t in report["targets"]:
        lines.append(f"| {t['target']} | {t['structure']} | {t['configurations']} | "
                     f"{t['prior_results']} | " + " | ".join(
                         f"{t[a]['median_calls']:g} / {t[a]['mean_calls']:.1f} "
                         f"({t[a]['reached']}/{t[a]['runs']})" for a in arms) + " |")
    o = report["overall"]
    lines.append("| **overall** | | | | " + " | ".join(
        f"**{o[a]['median_calls']:g} / {o[a]['mean_calls']:.1f}** ({o[a]['reached']}/"
        f"{o[a]['runs']})" for a in arms) + " |")
    lines.append("")
    lines += [f"- {arm} vs unseeded: {o[arm]['mean_call_reduction']:.1%} fewer calls on the mean, "
              f"{o[arm]['median_call_reduction']:.1%} on the median (the issue's target: 30%)"
              for arm in arms if "mean_call_reduction" in o[arm]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--hybrid-stops", action="store_true",
                        help="end each sweep where the hybrid agent would")
    args = parser.parse_args(argv)
    scenarios = [sweep_scenario(entry) for entry in load_table()]
    report = compare(scenarios, list(range(args.seeds)), arms=tuple(ARMS),
                     hybrid_stops=args.hybrid_stops)
    commit = source_commit() or "unknown"
    report |= {"arms": list(ARMS), "commit": commit, "date": datetime.date.today().isoformat(),
               "table": str(DEFAULT_TABLE.relative_to(DEFAULT_TABLE.parents[3]))}
    markdown = _markdown(report, commit)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"tuner-seeding-{commit[:7]}" + ("-hybrid-stops" if args.hybrid_stops else "")
    atomic_write_text(args.out / f"{stem}.json", json.dumps(report, indent=1, default=str) + "\n")
    atomic_write_text(args.out / f"{stem}.md", markdown)
    print(markdown)


if __name__ == "__main__":
    main()
