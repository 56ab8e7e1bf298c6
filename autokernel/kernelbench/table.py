"""The set's table: one row per problem and KernelBench's fast_p, as markdown, JSON and TSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from autokernel.device import CPU_TIMING_NOTE
from autokernel.kernelbench.problem import DONE, NO_TARGET
from autokernel.kernelbench.scoring import THRESHOLDS, fast_p_table
from autokernel.text import count_of, format_ratio, format_speedup, markdown_cell

TABLE_STEM = "results"
TSV_COLUMNS = ("problem", "status", "correctness", "speedup_vs_eager", "speedup_vs_compile",
               "wall_speedup_vs_eager", "wall_speedup_vs_compile", "speedup_figure",
               "optimized", "stage", "reason", "seconds", "workspace")
MD_COLUMNS = ("problem", "status", "correct", "vs eager", "vs compile", "wall vs eager",
              "wall vs compile", "optimized targets", "why")
FIGURES_NOTE = (
    "vs eager / vs compile: end-to-end speedup in device time per forward (the GPU busy time of "
    "one forward of the model with its kernels spliced in, from `autokernel verify`: CUDA-graph "
    "replays timed with CUDA events, L2 flushed; KernelBench also times a forward with CUDA "
    "events, here with the host's launch time kept out); fast_p uses these. wall vs eager / wall "
    "vs compile: wall time per synchronized forward, host launch included, which for a small, "
    "host-bound forward is mostly launch cost. Per target, its kernel's device-time speedup at "
    "the profiled shape.")
OLDER_RECORD = "wall only (a record from before device times were kept)"
BASELINE_LABELS = {"eager": "eager", "compile": "torch.compile"}
# A problem given to the set that has not run (the set was interrupted before it): a row of the
# table all the same, so the table counts every problem given.
NOT_RUN = "not run"
CPU_NOTE = f"{CPU_TIMING_NOTE}; torch.compile was not timed"


def with_figures(record: dict[str, Any]) -> dict[str, Any]:
    """A record with both figures labelled. One written before device times were kept has only
    the wall figure, under speedup_vs_*: it moves to wall_speedup_vs_*, and its device figures
    (what fast_p counts) are unmeasured."""
    if "speedup_figure" in record:
        return record
    return {**record, "speedup_figure": OLDER_RECORD,
            "wall_speedup_vs_eager": record.get("speedup_vs_eager"),
            "wall_speedup_vs_compile": record.get("speedup_vs_compile"),
            "speedup_vs_eager": None, "speedup_vs_compile": None, "compile_vs_eager": None}


def with_problems_not_run(records: list[dict[str, Any]], names: list[str] | None
                          ) -> list[dict[str, Any]]:
    """`records`, then a `NOT_RUN` row for each of `names` that has none, in `names`' order."""
    if names is None:
        return records
    by_name = {r.get("problem"): r for r in records}
    return [by_name.get(name) or {
        "problem": name, "status": NOT_RUN, "correct": False, "correctness": "–",
        "speedup_vs_eager": None, "speedup_vs_compile": None, "compile_vs_eager": None,
        "speedup_figure": "", "wall_speedup_vs_eager": None, "wall_speedup_vs_compile": None,
        "targets": [], "notes": [], "stage": None, "reason": "the set stopped before it",
        "seconds": None} for name in names] + [r for r in records if r.get("problem") not in names]


def target_summary(target: dict[str, Any], verified: bool) -> str:
    """'softmax 1.84× eager, 1 call/fwd': a target's kernel and whether the model used it."""
    name = target["kernel_type"]
    if not target["kernel"]:
        return f"{name}: not reached" if target["status"] == "pending" else \
            f"{name}: no passing kernel"
    text = f"{name} {format_speedup(target['speedup_vs_eager'])} eager"
    if not verified:
        return text
    if not target["spliced"]:
        return f"{text}, left out (slower than eager)"
    calls = target["calls_per_forward"]
    return f"{text}, not routed" if not calls else f"{text}, {count_of(calls, 'call')}/fwd"


def optimized_cell(record: dict[str, Any]) -> str:
    if record["status"] == NO_TARGET:
        return "no optimizable target"
    verified = record["status"] == DONE
    return "; ".join(target_summary(t, verified) for t in record.get("targets", [])) or "–"


def reason_cell(record: dict[str, Any]) -> str:
    reason = record.get("reason") or ""
    stage = record.get("stage")
    return f"{stage}: {reason}" if stage and reason else reason


def fast_p_rows(records: list[dict[str, Any]]) -> list[list[str]]:
    table = fast_p_table(with_figures(r) for r in records)
    rows = []
    for baseline, row in table.items():
        cells = ["–" if row[f"fast_{p:g}"] is None else f"{row[f'fast_{p:g}']:.2f}"
                 for p in THRESHOLDS]
        rows.append([BASELINE_LABELS[baseline], *cells, f"{row['measured']}/{row['problems']}"])
    return rows


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(markdown_cell(c) for c in cells) + " |"


def markdown(records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    where = meta.get("gpu") or meta["device"]
    not_run = sum(r.get("status") == NOT_RUN for r in records)
    lines = [
        f"# autokernel kernelbench: {count_of(len(records), 'problem')}"
        + (f" ({not_run} not run yet)" if not_run else "") + f", {meta['dtype']} on {where}",
        "",
        (f"{meta['minutes_per_problem']:g} min of optimization per problem, agent "
         f"{meta['agent']}; autokernel {meta['versions'].get('autokernel', '?')} at commit "
         f"{meta['commit']}; torch {meta['versions'].get('torch', '?')}, triton "
         f"{meta['versions'].get('triton', '?')}; {meta['created']}."),
        FIGURES_NOTE,
        "",
        _md_row(list(MD_COLUMNS)),
        _md_row(["---"] * len(MD_COLUMNS)),
    ]
    records = [with_figures(r) for r in records]
    for r in records:
        lines.append(_md_row([r["problem"], r["status"], r["correctness"],
                              format_ratio(r["speedup_vs_eager"]),
                              format_ratio(r["speedup_vs_compile"]),
                              format_ratio(r["wall_speedup_vs_eager"]),
                              format_ratio(r["wall_speedup_vs_compile"]),
                              optimized_cell(r), reason_cell(r)]))
    lines += [
        "",
        ("fast_p (KernelBench): the fraction of all problems that are correct with a "
         "device-time speedup over the baseline greater than p (fast_0: the fraction correct)."),
        "",
        _md_row(["baseline", *(f"fast_{p:g}" for p in THRESHOLDS), "with a speedup"]),
        _md_row(["---"] * (len(THRESHOLDS) + 2)),
        *(_md_row(row) for row in fast_p_rows(records)),
    ]
    if meta["device"] == "cpu":
        lines += ["", CPU_NOTE]
    return "\n".join(lines) + "\n"


def tsv(records: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(TSV_COLUMNS)
    for r in map(with_figures, records):
        cells = {**r, "optimized": optimized_cell(r), "reason": r.get("reason") or ""}
        writer.writerow(["" if cells.get(c) is None else str(cells[c]).replace("\t", " ")
                         .replace("\n", " ") for c in TSV_COLUMNS])
    return buffer.getvalue()


def table_paths(out: Path) -> dict[str, Path]:
    """Where the set's table is, by format: results.md, results.json, results.tsv."""
    return {ext: out / f"{TABLE_STEM}.{ext}" for ext in ("md", "json", "tsv")}


def write_tables(out: Path, records: list[dict[str, Any]], meta: dict[str, Any],
                 problems: list[str] | None = None) -> dict[str, Path]:
    """results.md, results.json and results.tsv in `out`; their paths by format. `problems`:
    every problem given, by name, so those not run yet are rows too."""
    records = [with_figures(r) for r in with_problems_not_run(records, problems)]
    paths = table_paths(out)
    paths["md"].write_text(markdown(records, meta), encoding="utf-8")
    document = {"meta": meta, "fast_p": fast_p_table(records), "problems": records}
    paths["json"].write_text(json.dumps(document, indent=2, default=str) + "\n",
                             encoding="utf-8")
    paths["tsv"].write_text(tsv(records), encoding="utf-8")
    return paths
