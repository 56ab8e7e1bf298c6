"""A finished, verified run recorded as a measured result: docs/benchmarks/NAME/ and the README.

`record_result(run_dir, benchmarks_dir, name)` copies the run's report.md, progress.png,
results.tsv and verify.json into `benchmarks_dir/NAME/` with a README.md saying what was run
where (GPU, driver, versions, commit, command), and `readme_section` renders the README's "A
real night" section from the same run: the per-target table (the keep rule's figure and the best
kernel's speedups at the primary shape, as report.md has them) and verify's end-to-end figures
against eager PyTorch and torch.compile. `python -m autokernel.benchmarks record-result` calls
both; nothing here invents a figure: every number comes from the run's own files.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from autokernel.integrate.report import RunReport, build_report, write_report
from autokernel.text import format_duration, format_ratio, format_speedup, markdown_cell

SECTION_BEGIN = ("<!-- gpu-result:begin (written by python -m autokernel.benchmarks "
                 "record-result) -->")
SECTION_END = "<!-- gpu-result:end -->"
COPIED_FILES = ("report.md", "progress.png", "results.tsv", "verify.json")
TABLE = ("target", "share", "× baseline (keep rule)", "× eager", "× compile", "experiments",
         "kept")


def _end_to_end(verify: dict[str, Any]) -> dict[str, float | None]:
    from autokernel.integrate.end_to_end import DEVICE, speedup_figure

    device = speedup_figure(verify, DEVICE)
    return {"vs_eager": device.get("vs_eager"), "vs_compile": device.get("vs_compile"),
            "patched_compile_vs_compile": device.get("patched_compile_vs_compile")}


def end_to_end_sentence(verify: dict[str, Any]) -> str:
    """'End to end (`autokernel verify`, device time per forward): 1.123× vs eager PyTorch,
    1.034× vs torch.compile; ...; output PASS, gradients PASS.'"""
    figures = _end_to_end(verify)
    parts = [f"{format_ratio(figures['vs_eager'])} vs eager PyTorch"]
    if figures["vs_compile"] is not None:
        parts.append(f"{format_ratio(figures['vs_compile'])} vs torch.compile")
    if figures["patched_compile_vs_compile"] is not None:
        parts.append(f"{format_ratio(figures['patched_compile_vs_compile'])} for the patched "
                     "model under torch.compile vs torch.compile")
    accuracy = "PASS" if verify.get("accuracy", {}).get("passed") else "FAIL"
    gradients = verify.get("gradients", {})
    checks = f"output {accuracy}" + (
        f", gradients {'PASS' if gradients.get('passed') else 'FAIL'}"
        if gradients.get("checked") else "")
    sentence = (f"End to end (`autokernel verify`, device time per forward, the patched eager "
                f"model): {', '.join(parts)}; {checks}.")
    from autokernel.integrate.end_to_end import delivery_sentence

    delivered = delivery_sentence(verify)
    if delivered:
        sentence += f" Delivered by `autokernel.load(run).optimize(model)`: {delivered}."
    return sentence


def readme_section(report: RunReport, record_dir: str, gpu: str, model: str) -> str:
    """The README's measured-result section, between its markers."""
    if not report.verify:
        raise ValueError(f"{report.root} is not verified yet: run `autokernel verify` on it")
    rows = [[t.tag, f"{t.share * 100:.1f}%", format_speedup(t.vs_baseline),
             format_speedup(t.speedup_vs_eager), format_speedup(t.speedup_vs_compile),
             str(t.experiments), str(t.keeps)] for t in report.targets]
    lines = [
        SECTION_BEGIN,
        f"`{model}` ({report.dtype}) on {markdown_cell(gpu)}, agent "
        f"{report.agent}: {report.experiments} experiments in "
        f"{format_duration(report.run_seconds)}. Per target, the best kernel against its "
        "baseline by the keep rule's figure, and against eager PyTorch and torch.compile at the "
        "target's primary shape:",
        "",
        "| " + " | ".join(TABLE) + " |",
        "|" + "|".join("---" for _ in TABLE) + "|",
        *("| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in rows),
        "",
        end_to_end_sentence(report.verify),
        "",
        f"![progress]({record_dir}/progress.png)",
        "",
        f"GPU, driver, versions, commit and command: [{record_dir}]({record_dir}/README.md).",
        SECTION_END,
    ]
    return "\n".join(lines)


def replace_section(readme: str, section: str) -> str:
    """`readme` with the text between the markers (markers included) replaced by `section`."""
    start, end = readme.find(SECTION_BEGIN), readme.find(SECTION_END)
    if start < 0 or end < start:
        raise ValueError(f"the README has no {SECTION_BEGIN} ... {SECTION_END} section")
    return readme[:start] + section + readme[end + len(SECTION_END):]


def driver_version() -> str:
    """The NVIDIA driver's version, from nvidia-smi ("unknown" without one)."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else "unknown"


def record_readme(report: RunReport, info: dict[str, Any], commit: str, driver: str) -> str:
    """docs/benchmarks/NAME/README.md: what was run, where, and the files beside it."""
    model = info.get("model", report.model)
    versions = ", ".join(f"{k} {v}" for k, v in (report.verify or {}).get(
        "versions", info.get("versions", {})).items())
    return "\n".join([
        f"# A night on {model} ({report.dtype}, {report.gpu or report.device})",
        "",
        f"- GPU: {report.gpu or report.device} (driver {driver}); {versions}",
        f"- autokernel commit `{commit}`; run created {info.get('created', '?')}, verified "
        f"{(report.verify or {}).get('created', '?')}",
        f"- command: `{info.get('command', '?')}`, then `autokernel verify` and "
        "`autokernel report`",
        f"- {report.experiments} experiments in {format_duration(report.run_seconds)} of active "
        f"time, agent {report.agent}; stopped: {report.stop_reason or '?'}",
        "",
        end_to_end_sentence(report.verify or {}),
        "",
        "Files: `report.md` (the run's report), `progress.png`, `results.tsv`, `verify.json`, "
        "copied from the run's workspace by `python -m autokernel.benchmarks record-result`.",
        "",
    ])


def record_result(run_dir: Path, benchmarks_dir: Path, name: str, commit: str,
                  driver: str | None = None, allow_cpu: bool = False) -> tuple[Path, str]:
    """Write benchmarks_dir/NAME/ from the verified run; its directory and the README section
    (with links relative to the repository root). A CPU run's timings mean nothing: refused
    unless `allow_cpu` (a rehearsal of the script)."""
    from autokernel.integrate.loader import open_run

    run = open_run(run_dir)
    report = build_report(run)
    if not report.verify:
        raise ValueError(f"{run_dir} is not verified yet: run `autokernel verify {run_dir}`")
    if not report.timing_meaningful and not allow_cpu:
        raise ValueError(f"{run_dir} ran on the CPU, whose timings say nothing about a GPU "
                         "(--allow-cpu to rehearse anyway)")
    write_report(report)  # report.md and progress.png from the run as it is now
    target = benchmarks_dir / name
    target.mkdir(parents=True, exist_ok=True)
    for file in COPIED_FILES:
        shutil.copy2(report.root / file, target / file)
    (target / "README.md").write_text(
        record_readme(report, run.info, commit, driver or driver_version()), encoding="utf-8")
    record_dir = f"{benchmarks_dir.name}/{name}"
    if benchmarks_dir.parent.name:
        record_dir = f"{benchmarks_dir.parent.name}/{record_dir}"
    return target, readme_section(report, record_dir, report.gpu or report.device,
                                  str(run.info.get("model", report.model)))
