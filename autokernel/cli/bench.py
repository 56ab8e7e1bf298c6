"""`autokernel bench KERNEL.py`: the correctness + anti-cheat + timing harness on one kernel file.

Exit status 0 only for PASS; 1 for FAIL, REJECTED, CRASH, TIMEOUT or SKIPPED (a CUDA kernel on
--device cpu); 2 for bad input (no such
file, not a kernel file, unknown shape or dtype). With --json the BenchResult is printed as one
JSON object; with --json-out PATH it is also written to PATH. Scripts should read the verdict from
the exit status or the --json-out file, never from stdout's last line: stdout is a terminal
stream other processes can write to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from autokernel.cli._common import (DEVICE_OPTION, DTYPE_DEFAULT, Device, console, device_or_fail,
                                    fail, plain)
from autokernel.tables import Column, fit_table
from autokernel.text import format_speedup

STATUS_STYLE = {"PASS": "bold green", "FAIL": "bold red", "REJECTED": "bold magenta",
                "CRASH": "bold red", "TIMEOUT": "bold yellow", "SKIPPED": "bold cyan"}
STAGE_STYLE = {"pass": "green", "fail": "red", "skip": "dim"}


def _split(text: str | None) -> list[str] | None:
    if not text:
        return None
    return [part.strip() for part in text.replace(";", ",").split(",") if part.strip()]


def _number(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "–" if value is None else f"{value:,.{digits}f}{suffix}"


STAGE_COLUMNS = (Column("stage"), Column("result"), Column("inputs checked", "inputs",
                                                             justify="right"))
# Two tables, one row per timed shape: the times and speedups, then throughput, peak and launch
# cost (figures never split; abbreviated headers, then the columns marked `drop`, go first on a
# narrow terminal: autokernel.tables).
TIMING_COLUMNS = (
    Column("shape"), Column("dtype", drop=1),
    Column("kernel µs (± IQR)", "kernel µs", justify="right",
           legend="the kernel's median device time (± interquartile range)"),
    Column("eager µs", justify="right"), Column("compile µs", justify="right", drop=2),
    Column("× eager", "×eager", justify="right"),
    Column("× compile", "×compile", justify="right"),
    Column("× incumbent (95% CI)", "×incumbent", justify="right",
           legend="the paired speedup over --incumbent, timed in the same rounds, with its 95% "
                  "interval"),
)
ROOFLINE_COLUMNS = (
    Column("shape"), Column("dtype", drop=1), Column("throughput", justify="right"),
    Column("% of peak", "%peak", justify="right", legend="percent of the datasheet peak"),
    Column("% of measured peak", "%meas", justify="right",
           legend="percent of the peak measured on this GPU"),
    Column("launch µs", "launch", justify="right", legend="host launch cost of the kernel, µs"),
    Column("eager launch µs", "eager launch", justify="right",
           legend="host launch cost of eager PyTorch, µs"),
)


def timing_rows(result: Any) -> tuple[list[list[str]], list[list[str]]]:
    """The two tables' cells, one row per timed shape."""
    times, roofline = [], []
    for t in result.timings:
        shape = "x".join(str(d) for d in t.shape)
        compile_us = _number(t.compile_us) + ("*" if t.compile_cached and t.compile_us else "")
        throughput = "–" if t.throughput is None \
            else f"{t.throughput:,.4g} {t.throughput_unit or ''}".strip()
        incumbent = "–"
        if t.vs_incumbent is not None:
            incumbent = (f"{t.vs_incumbent:.3f}× ({t.vs_incumbent_lo:.3f}–"
                         f"{t.vs_incumbent_hi:.3f})" + (" re-timed" if t.retimed else ""))
        times.append([shape, t.dtype, f"{_number(t.latency_us)} ±{_number(t.iqr_us)}",
                      _number(t.eager_us), compile_us, format_speedup(t.speedup_vs_eager),
                      format_speedup(t.speedup_vs_compile), incumbent])
        roofline.append([shape, t.dtype, throughput, _number(t.pct_peak_datasheet, 1, "%"),
                         _number(t.pct_peak_measured, 1, "%"), _number(t.launch_us, 1),
                         _number(t.eager_launch_us, 1)])
    return times, roofline


def print_summary(result: Any, kernel_path: Path, out: Console | None = None) -> None:
    """The human-readable verdict: header, stages table, timing table, notes."""
    from rich.text import Text

    out = out or console
    status = result.status.value
    out.print(f"[bold]{kernel_path}[/]  {result.kernel_type or '?'} / "
              f"{result.backend or '?'} on {result.gpu or result.device}", highlight=False)
    verdict = f"[{STATUS_STYLE.get(status, 'bold')}]{status}[/]"
    if result.stage and status != "PASS":
        verdict += f" at [bold]{result.stage}[/]"
    if result.rule:
        verdict += f" [dim]({result.rule})[/]"
    out.print(verdict, highlight=False)
    if result.reason:
        out.print(f"  {result.reason}", highlight=False)

    if result.stages:
        rows = []
        for name, outcome in result.stages.items():
            count = result.stage_cases.get(name)
            if name == "timing" and result.timings:
                count = sum(t.samples for t in result.timings)
            rows.append([name, Text(outcome, style=STAGE_STYLE.get(outcome, "")),
                         "–" if count is None else str(count)])
        out.print(fit_table(STAGE_COLUMNS, rows, out.width, title="Stages"))

    if result.timings:
        meaningful = result.timing_meaningful
        title = ("Device time (median, L2 flushed, fresh inputs, interleaved rounds)"
                 if meaningful else "Timing (host clock, Triton interpreter)")
        notes = []
        if meaningful:
            notes.append("launch µs: host launch cost, one synchronous call's wall time minus "
                         "its device time (a separate figure, never part of the device time)")
        times, roofline = timing_rows(result)
        out.print(fit_table(TIMING_COLUMNS, times, out.width, title=title))
        if any(any(cell != "–" for cell in row[2:]) for row in roofline):
            out.print(fit_table(ROOFLINE_COLUMNS, roofline, out.width,
                                title="Throughput, peak and launch cost", notes=notes))
        if any(t.compile_cached for t in result.timings):
            out.print("* compile latency from the baseline cache", style="dim")
        if not meaningful:
            out.print("[yellow]Timings on the CPU interpreter are not meaningful;[/] run on "
                      "a GPU (--device cuda) to measure.", highlight=False)

    meaningful_timing = not result.timings or result.timing_meaningful
    footer = [f"harness {result.harness_seconds:.1f} s" if result.harness_seconds else ""]
    if result.peak_vram_mb is not None:
        footer.append(f"peak VRAM {result.peak_vram_mb:,.1f} MB")
    out.print("  ".join(part for part in footer if part), style="dim", highlight=False)
    for note in result.notes:
        if not meaningful_timing and "not meaningful" in note:
            continue  # the harness's own CPU caveat: said once above, in words with the way out
        out.print(f"  note: {note}", style="dim", highlight=False)


def bench(
    kernel: Path = typer.Argument(..., metavar="KERNEL.py", help="The kernel file to judge."),
    device: Device = DEVICE_OPTION,
    shapes: str = typer.Option(None, "--shapes",
                               help="Timed shapes, primary first, e.g. 4096x4096,1024x50257.",
                               show_default="the op's first bench shape"),
    dtypes: str = typer.Option(None, "--dtypes",
                               help="Timed dtypes, comma-separated, of fp16, bf16, fp32. "
                                    "Correctness always covers every dtype of the op.",
                               show_default=DTYPE_DEFAULT),
    timeout: float = typer.Option(600.0, "--timeout", min=1.0,
                                  help="Wall-clock limit in seconds; the worker is then killed."),
    json_output: bool = typer.Option(False, "--json",
                                     help="Print the result as one JSON object (last line)."),
    quick: bool = typer.Option(False, "--quick",
                               help="Fewer sweep and edge shapes (every detector still runs)."),
    cache_dir: Path = typer.Option(None, "--cache-dir",
                                   help="Where compile baselines and Triton caches persist.",
                                   show_default="$AUTOKERNEL_CACHE_DIR or ~/.cache/autokernel"),
    incumbent: Path = typer.Option(None, "--incumbent",
                                   help="A kernel file to time in the same rounds (paired A/B): "
                                        "reports the speedup over it with a 95% interval."),
    min_gain: float = typer.Option(0.01, "--min-gain", min=0.0,
                                   help="With --incumbent: a wide interval straddling 1 + this "
                                        "is re-timed once with more rounds."),
    json_out: Path = typer.Option(None, "--json-out",
                                  help="Also write the result as JSON to this file (what scripts "
                                       "should read, with the exit status)."),
) -> None:
    """Judge KERNEL.py: static scan, five correctness stages, anti-cheat, timing vs PyTorch.

    Exit status 0 only for PASS.
    """
    from autokernel.harness.runner import BenchInputError, run_bench
    from autokernel.kernelfile import KernelFileError, read_kernel_file
    from autokernel.ops import get_spec
    from autokernel.ops.spec import parse_dtype

    if not kernel.is_file():
        fail(f"no such kernel file: {kernel}")
    if incumbent is not None and not incumbent.is_file():
        fail(f"no such incumbent kernel file: {incumbent}")
    try:
        info = read_kernel_file(kernel)
    except (KernelFileError, UnicodeDecodeError) as exc:
        fail(f"{kernel} is not a kernel file: {exc}")
    except OSError as exc:
        fail(f"cannot read {kernel}: {exc}")
    spec = get_spec(info.kernel_type)
    shape_list, dtype_list = _split(shapes), _split(dtypes)
    try:
        for text in shape_list or []:
            spec.parse_shape(text)
        for text in dtype_list or []:
            parse_dtype(text)
    except ValueError as exc:
        fail(str(exc))
    resolved = device_or_fail(plain(device), say_choice=not json_output)
    try:
        result = run_bench(kernel, device=resolved, shapes=shape_list, dtypes=dtype_list,
                           timeout_s=timeout, cache_dir=cache_dir, quick=quick,
                           incumbent=incumbent, min_gain=min_gain)
    except BenchInputError as exc:
        fail(str(exc))
    if json_out is not None:
        from autokernel.files import atomic_write_text

        atomic_write_text(json_out, result.to_json() + "\n")
    if json_output:
        typer.echo(result.to_json())
    else:
        print_summary(result, kernel)
    raise typer.Exit(0 if result.passed else 1)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
