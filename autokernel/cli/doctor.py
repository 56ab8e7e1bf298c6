"""`autokernel doctor`: is this machine ready? Versions, the GPU and its ceilings, the toolchain.

Exit status 0 when the essentials work, 1 otherwise (the checks and which are essential:
autokernel.pipeline.doctor).
"""

from __future__ import annotations

import json

import typer

from autokernel.cli._common import console, fail

_STYLE = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[bold red]FAIL[/]",
          "info": "[cyan]info[/]"}


def doctor(
    calibrate: bool | None = typer.Option(
        None, "--calibrate/--no-calibrate",
        help="Re-measure the GPU's ceilings / never measure.",
        show_default="measure only if none are cached for this GPU"),
    aot: bool = typer.Option(True, "--aot/--no-aot",
                             help="Also compile a tiny Triton kernel for Hopper (sm_90)."),
    gpu: int = typer.Option(0, "--gpu", min=0, help="Index of the GPU to report on."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead."),
) -> None:
    """Check the versions, GPU (datasheet, measured ceilings), Triton, sandbox, git and API key."""
    from autokernel.pipeline import PipelineError
    from autokernel.pipeline.doctor import run_checks

    try:
        report = run_checks(gpu=gpu, calibrate=calibrate, aot=aot)
    except PipelineError as exc:
        fail(str(exc), code=exc.code)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        from rich.table import Table

        table = Table(title="autokernel doctor", show_lines=False, expand=False)
        table.add_column("check", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("detail", overflow="fold")
        for c in report.checks:
            table.add_row(c.name + (" *" if c.essential else ""), _STYLE[c.status], c.detail)
        console.print(table)
        console.print("* essential. " + ("[green]Ready.[/]" if report.ok else
                                         "[bold red]Not ready:[/] an essential check failed."))
    raise typer.Exit(0 if report.ok else 1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
