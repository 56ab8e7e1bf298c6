"""`autokernel profile MODEL.py`: where the model's time goes, ranked by Amdahl's law."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from autokernel.cli._common import (CLASS_NAME_OPTION, DEVICE_OPTION, DTYPE_OPTION,
                                    MODEL_FILE_ARGUMENT, Device, Dtype, console, device_or_fail,
                                    fail, plain)
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
    # The status line shows on a terminal only: piped, rich prints nothing of it.
    with console.status(f"profiling {model_file} ({warmup} warm-up + {iters} forwards)") as status:
        try:
            record, plan = profile_plan(
                loaded, model=str(model_file), class_name=class_name, warmup=warmup,
                iters=iters, trace_path=trace_path, compiled=compiled, rank_by=rank_by,
                progress=lambda what: status.update(f"profiling {model_file}: {what}"))
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


def print_plan(plan: Plan, top: int | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from autokernel.profiling.ranking import plan_columns, plan_rows, ranking_line

    where = plan.gpu or plan.device
    table = Table(
        title=f"{plan.model} ({plan.class_name}), {plan.dtype} on {where}: "
              f"{plan.total_ms:.3f} ms/forward of {plan.time_source}; {ranking_line(plan)}",
        caption=f"{plan.iterations} profiled forwards after {plan.warmup} warm-up. "
                "2x e2e: end-to-end speedup if that kernel alone got 2x faster; "
                "cum. 2x: this and every target above it 2x faster; "
                "ceiling: all of them free (∞: no time is left outside them). "
                "matmul (linear/batched/gemm): linear layers, batched products and other "
                "GEMMs, a target each.",
    )
    for column in plan_columns(plan):
        table.add_column(column, justify="right" if column in ("share", "compiled", "ms/fwd",
                                                               "calls") else "left",
                         overflow="fold")
    for row in plan_rows(plan, top):
        table.add_row(*row, style="dim" if not row[0] else None)
    # Logs and pipes get a wide table rather than rich's 80-column default.
    out = console if console.is_terminal else Console(width=max(console.width, 150))
    out.print(table)
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
