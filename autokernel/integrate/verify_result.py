"""verify.json: how `autokernel verify`'s result is saved, read back and printed.

The measurement itself is `verify.py`'s; this module only knows the result's file and how it reads
to a person, so `autokernel report` can show a saved result without importing the check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autokernel.files import atomic_write_text
from autokernel.integrate.accuracy import ERROR_GROWTH
from autokernel.integrate.end_to_end import end_to_end_lines, timing_table
from autokernel.tables import Column, fit_table
from autokernel.text import count_of, format_speedup, scope_name

if TYPE_CHECKING:
    from rich.console import Console

VERIFY_FILE = "verify.json"

# The per-kernel speedup is the run's best kept figure: call-weighted over the shapes the harness
# timed, so it can differ from results.tsv's speedup_vs_pytorch (the primary shape's alone).
KERNEL_SPEEDUP_COLUMN = "kernel speedup (device, call-weighted)"
# Fitted to the terminal by autokernel.tables: names and figures whole, empty columns dropped.
KERNEL_TABLE = (
    Column("kernel"), Column("routed", wrap=True), Column("calls/fwd", justify="right"),
    Column("left to PyTorch", wrap=True),
    Column(KERNEL_SPEEDUP_COLUMN, "kernel ×eager", justify="right",
           legend="the kernel's device-time speedup over eager PyTorch, call-weighted over "
                  "its timed shapes"),
    Column("share", justify="right"), Column("backward"),
)
KERNEL_COLUMNS = tuple(column.header for column in KERNEL_TABLE)


def save_result(root: Path, result: dict[str, Any]) -> Path:
    """Write verify.json in the run's workspace; a crash mid-write leaves the previous one."""
    path = root / VERIFY_FILE
    atomic_write_text(path, json.dumps(result, indent=2, default=str) + "\n", durable=False)
    return path


def read_result(root: Path) -> dict[str, Any] | None:
    """The saved verify.json, or None when there is none or it does not parse."""
    path = root / VERIFY_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def routed_where(row: dict[str, Any]) -> str:
    """Where a kernel was spliced in: modules, the model's own functions, call scopes."""
    parts = []
    if row.get("modules"):
        parts.append(count_of(len(row["modules"]), "module"))
    parts += row.get("functions", [])
    if row.get("scopes"):
        parts.append("calls in " + ", ".join(scope_name(p) for p in row["scopes"]))
    return "; ".join(parts) or "–"


def _left_to_pytorch(row: dict[str, Any]) -> str:
    """The calls a kernel handed back to PyTorch, and the places it was not spliced into."""
    fallbacks = "; ".join(f"{r} ×{n}" for r, n in row["fallbacks"].items()) or "–"
    skipped = "; ".join(f"{scope_name(p)}: {why}" for p, why in row["skipped"].items())
    if not skipped:
        return fallbacks
    return f"{fallbacks} (skipped {skipped})" if fallbacks != "–" else f"skipped {skipped}"


def _kernel_speedup(row: dict[str, Any]) -> str:
    return f"{format_speedup(row['speedup_vs_eager'])} eager" if row["speedup_vs_eager"] else "–"


def print_result(result: dict[str, Any], console: Console) -> None:
    """The kernels table, the accuracy and gradient verdicts and the end-to-end figures."""
    rows = [[row["tag"], routed_where(row), str(row["calls_per_forward"]), _left_to_pytorch(row),
             _kernel_speedup(row), f"{row['share'] * 100:.1f}%", row["backward"]]
            for row in result["kernels"]]
    console.print(fit_table(KERNEL_TABLE, rows, console.width, title=f"verify {result['run']}: "
                            f"{result['dtype']} on {result['gpu'] or result['device']}"))
    saved = f"saved {Path(result['directory']) / VERIFY_FILE}"
    if result.get("failure"):
        console.print(f"[bold red]FAIL[/]: {result['failure']}", highlight=False)
        console.print(saved, highlight=False)
        return
    accuracy = result["accuracy"]
    verdict = "[green]PASS[/]" if accuracy["passed"] else "[bold red]FAIL[/]"
    console.print(f"output vs {accuracy['oracle']} oracle: relative error original "
                  f"{accuracy['error_original']:.2e}, patched {accuracy['error_patched']:.2e} "
                  f"(bound {accuracy['bound']:.2e} = {ERROR_GROWTH:g}× original + floor); "
                  f"patched vs original {accuracy['difference']:.2e}, max |Δ| "
                  f"{accuracy['max_abs_difference']:.2e}: {verdict}")
    gradients = result["gradients"]
    if gradients.get("failure"):
        console.print(f"gradients: [bold red]FAIL[/]: {gradients['failure']}", highlight=False)
    elif gradients.get("checked"):
        verdict = "[green]PASS[/]" if gradients["passed"] else "[bold red]FAIL[/]"
        console.print(f"gradients of {count_of(gradients['parameters'], 'parameter')}: "
                      f"relative error original {gradients['error_original']:.2e}, patched "
                      f"{gradients['error_patched']:.2e} (bound {gradients['bound']:.2e}): "
                      f"{verdict}")
    print_end_to_end(result, console)
    console.print(saved, highlight=False)


def print_end_to_end(result: dict[str, Any], console: Console, *, cpu_note: bool = True) -> None:
    """The end-to-end figures on the terminal: the timing table fitted to its width, then the
    ratio lines (`end_to_end_lines`)."""
    headers, rows = timing_table(result)
    if rows:
        columns = [Column(headers[0] or "model"), Column(headers[1], wrap=True),
                   Column(headers[2], wrap=True)]
        console.print(fit_table(columns, rows, console.width))
    for line in end_to_end_lines(result, cpu_note=cpu_note, table=False):
        console.print(line, highlight=False)
