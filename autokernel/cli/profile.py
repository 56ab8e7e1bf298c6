"""`autokernel profile MODEL.py`: where the model's time goes, ranked by Amdahl's law."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from autokernel.cli._common import (CLASS_NAME_OPTION, DEVICE_OPTION, DTYPE_OPTION,
                                    MODEL_FILE_ARGUMENT, Device, Dtype, console, device_or_fail,
                                    fail, plain, progress_steps)
from autokernel.tables import Column, fit_table
from autokernel.text import error_summary

if TYPE_CHECKING:
    from autokernel.profiling.plan import Plan


def _check_writable(path: Path | None, what: str) -> None:
    if path is not None and not path.parent.exists():
        fail(f"cannot write the {what} to {path}: directory {path.parent} does not exist")


def profile(
    model_file: Path = MODEL_FILE_ARGUMENT,
    device: Device = DEVICE_OPTION,
    dtype: Dtype = DTYPE_OPTION,
    class_name: str = CLASS_NAME_OPTION,
    top: int = typer.Option(None, "--top", help="Show the N highest-ranked targets "
                            "(the JSON plan lists them all, so shares add up to 100%)."),
    json_path: Path = typer.Option(None, "--json", help="Write the plan as JSON here."),
    trace_path: Path = typer.Option(None, "--trace", help="Write the Chrome trace here."),
    warmup: int = typer.Option(3, "--warmup", help="Forwards run before profiling."),
    iters: int = typer.Option(5, "--iters", help="Profiled forwards (times are per forward)."),
    events_path: Path = typer.Option(None, "--events", help="Write the recorded kernels, ops "
                                     "and modules as JSON (a replayable test fixture)."),
    compiled: bool = typer.Option(None, "--compiled/--no-compiled", help="Also profile the model "
                                  "under torch.compile and show each target's share of the "
                                  "compiled forward [default: on for cuda, off for cpu]."),
    rank_by: str = typer.Option("eager", "--rank-by", help="Rank the targets by their share of "
                                "the eager forward (eager) or of the torch.compile'd one "
                                "(compile: for a model delivered compiled)."),
) -> None:
    """Profile a model's forward and rank its kernels by share of the device time."""
    resolved = device_or_fail(plain(device))
    dtype = plain(dtype) or ("fp16" if resolved == "cuda" else "fp32")
    if top is not None and top < 1:
        fail("--top must be at least 1")
    if iters < 1:
        fail("--iters must be at least 1")
    if warmup < 0:
        fail("--warmup must be 0 or more")
    for path, what in ((json_path, "plan"), (trace_path, "trace"), (events_path, "events")):
        _check_writable(path, what)
    if rank_by not in ("eager", "compile"):
        fail(f"--rank-by must be eager or compile, not {rank_by!r}")
    if rank_by == "compile" and compiled is False:
        fail("--rank-by compile needs the compiled profile; drop --no-compiled")

    from autokernel.profiling.model_loader import ModelLoadError, load_model_file
    from autokernel.profiling.session import profile_plan

    try:
        loaded = load_model_file(model_file, class_name=class_name, dtype=dtype, device=resolved)
    except ModelLoadError as exc:
        fail(str(exc))
    with progress_steps(f"profiling {model_file}: {warmup} warm-up + {iters} forwards") as steps:
        try:
            record, plan = profile_plan(
                loaded, model=str(model_file), class_name=class_name, warmup=warmup,
                iters=iters, trace_path=trace_path, compiled=compiled, rank_by=rank_by,
                progress=lambda what: steps.step(f"profiling {model_file}: {what}"))
        except Exception as exc:  # the forward ran once already, so this is the machine's trouble
            fail(f"profiling {model_file} failed: {error_summary(exc)}", code=1)

    print_plan(plan, top)
    if json_path is not None:
        plan.save(json_path)
        console.print(f"plan written to {json_path}")
    if trace_path is not None:
        console.print(f"Chrome trace written to {trace_path} (open in ui.perfetto.dev)")
    if events_path is not None:
        record.save(events_path)
        console.print(f"recorded events written to {events_path}")


# How each of the plan's columns (profiling.ranking.PLAN_COLUMNS) is shown: figures and names
# never split, free text wrapping at spaces, the columns left out first on a narrow terminal
# (`drop`); a column not named here is shown as it is.
PLAN_DISPLAY: dict[str, Column] = {
    "#": Column("#", justify="right", keep_empty=True),
    "kernel type": Column("kernel type"),
    "share": Column("share", justify="right"),
    "compiled": Column("compiled", justify="right", drop=2),
    "ms/fwd": Column("ms/fwd", justify="right", drop=2),
    "calls": Column("calls", justify="right", drop=1),
    "bench shape": Column("bench shape", wrap=True),
    "dtype": Column("dtype", drop=1),
    "params": Column("params", wrap=True, drop=2),
    "verify splices": Column("verify splices", "splices", wrap=True,
                             legend="how `autokernel verify` would splice the kernel in"),
    "2x e2e": Column("2× e2e", justify="right"),
    "cum. 2x": Column("cum. 2×", justify="right", drop=3),
    "ceiling": Column("ceiling", justify="right", drop=3),
}
PLAN_NOTE = ("2× e2e: the end-to-end speedup if that kernel alone got 2× faster; cum. 2×: this "
             "and every target above it 2× faster; ceiling: all of them free (∞: no time is "
             "left outside them). matmul (linear/batched/gemm): linear layers, batched products "
             "and other GEMMs, a target each.")


def print_plan(plan: Plan, top: int | None = None, out: Console | None = None) -> None:
    """The ranked targets, fitted to the console's width (COLUMNS or the terminal's)."""
    from autokernel.profiling.ranking import plan_columns, plan_rows, ranking_line

    out = out or console
    where = plan.gpu or plan.device
    columns = [PLAN_DISPLAY.get(name, Column(name)) for name in plan_columns(plan)]
    rows = plan_rows(plan, top)
    title = (f"{plan.model} ({plan.class_name}), {plan.dtype} on {where}: "
             f"{plan.total_ms:.3f} ms per forward of {plan.time_source}, over "
             f"{plan.iterations} profiled forwards after {plan.warmup} warm-up; "
             f"{ranking_line(plan)}")
    out.print(fit_table(columns, rows, out.width, title=title, notes=[PLAN_NOTE],
                        row_styles=["dim" if not row[0] else None for row in rows]))
    if plan.other_ops:
        listed = ", ".join(f"{o['op'][:60]} {o['share']:.1%}" for o in plan.other_ops[:5])
        out.print(f"largest \"other\": {listed}", highlight=False)
    if plan.device == "cpu":
        out.print("[yellow]cpu: times are CPU op self times, not GPU kernel times[/]")
    if plan.message:
        out.print(f"[bold]{plan.message}[/]")
    for note in plan.notes:
        out.print(f"note: {note}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)
