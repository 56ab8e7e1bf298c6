"""The morning commands: `autokernel verify DIR`, `autokernel report DIR`, `autokernel export DIR`.

Each takes a run's workspace. Bad input (DIR is not a run, the run has no finished target, its
model no longer loads, an unusable --to path) is a one-line error and exit status 2. `verify`
exits 1 when the patched model's output or gradients are out of tolerance.
"""

from __future__ import annotations

from pathlib import Path

import typer

from autokernel.cli._common import DEVICE_OPTION, Device, console, err_console, fail, plain
from autokernel.text import count_of

DIRECTORY_HELP = "The run's workspace directory (from `autokernel run`)."


def verify(
    directory: Path = typer.Argument(..., metavar="DIR", help=DIRECTORY_HELP),
    device: Device = DEVICE_OPTION,
    iters: int = typer.Option(None, "--iters", help="Timed rounds per model (interleaved).",
                              show_default="as many as --budget allows, at least 20 on a GPU"),
    budget: float = typer.Option(20.0, "--budget", help="Seconds of timing, when --iters is "
                                 "not given."),
    compile_models: bool = typer.Option(None, "--compile/--no-compile", help="Also time "
                                        "torch.compile of the original and the patched "
                                        "model.", show_default="compile on cuda"),
    gradients: bool = typer.Option(True, "--gradients/--no-gradients", help="Check parameter "
                                   "gradients through the kernels' backward."),
    all_kernels: bool = typer.Option(False, "--all-kernels", help="Route every finished kernel, "
                                     "also those that do not make the model faster (left out "
                                     "by default)."),
) -> None:
    """Splice the run's finished kernels into its model; check the output; keep the kernels that
    make it faster, in each mode; time the deliveries end to end."""
    from autokernel.integrate.verify_result import print_result
    from autokernel.pipeline import PipelineError, Progress, VerifyRequest, verify_pipeline

    request = VerifyRequest(directory=directory, device=plain(device), iters=iters,
                            budget_s=budget, compile=compile_models, gradients=gradients,
                            all_kernels=all_kernels)
    try:
        result = verify_pipeline(request, Progress(console, err_console))
    except PipelineError as exc:
        fail(str(exc), code=exc.code)
    print_result(result, console)
    if not result["passed"]:
        raise typer.Exit(1)


def report(
    directory: Path = typer.Argument(..., metavar="DIR", help=DIRECTORY_HELP),
) -> None:
    """Write report.md and progress.png in the workspace and print the run's summary."""
    from autokernel.integrate.loader import RunError, open_run
    from autokernel.integrate.report import build_report, print_summary, write_report

    try:
        summary = build_report(open_run(directory))
    except RunError as exc:
        fail(str(exc))
    text, plot = write_report(summary)
    print_summary(summary, console)
    for line in (f"report: {text}", f"plot: {plot}"):  # a path a line: never broken
        console.print(line, highlight=False, soft_wrap=True)


def export(
    directory: Path = typer.Argument(..., metavar="DIR", help=DIRECTORY_HELP),
    to: Path = typer.Option(..., "--to", help="The module to write, e.g. llama_kernels.py."),
    all_kernels: bool = typer.Option(False, "--all-kernels", help="Export every finished "
                                     "kernel, also those verify left out of the model (or, "
                                     "before verify, slower than eager PyTorch alone)."),
) -> None:
    """Write the kernels verify kept as one self-contained module with `patch(model)` and
    `optimize(model)`."""
    from autokernel.integrate.export import ExportError, export_run
    from autokernel.integrate.loader import RunError, open_run

    try:
        run = open_run(directory, include_slower=all_kernels)
        tags = [t.tag for t in run.require_finished()]
        path = export_run(run, to)
    except (RunError, ExportError) as exc:
        fail(str(exc))
    console.print(f"wrote {path}: {count_of(len(tags), 'kernel')} ({', '.join(tags)}); needs "
                  f"torch and triton only. Use: import {path.stem}; {path.stem}.patch(model)",
                  highlight=False)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
    app.command("report")(report)
    app.command("export")(export)
