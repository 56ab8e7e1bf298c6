"""The `autokernel` command: one typer module per command group, assembled here."""

from __future__ import annotations

import importlib

import typer

from autokernel import __version__
from autokernel.cli._common import AutokernelCommand, AutokernelGroup

# Each module defines `register(app)`. Kept as names so that `autokernel --help` stays fast:
# heavy imports (triton, the harness, gitpython) happen inside the commands.
COMMAND_MODULES: tuple[str, ...] = (
    "bench",
    "doctor",
    "kernelbench",
    "profile",
    "results",
    "run",
)

app = typer.Typer(
    name="autokernel",
    help="Profile a PyTorch model, optimize its hottest GPU kernels overnight, splice them back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=AutokernelGroup,
    context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every command
)
# `autokernel --help` lists the commands in the order of a night.
COMMAND_ORDER: tuple[str, ...] = ("doctor", "profile", "run", "resume", "report", "verify",
                                  "export", "bench", "kernelbench")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"autokernel {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """autokernel: an overnight GPU-kernel optimizer for PyTorch."""


for _name in COMMAND_MODULES:
    importlib.import_module(f"autokernel.cli.{_name}").register(app)
for _command in app.registered_commands:
    _command.cls = AutokernelCommand  # help without "<bool>" for flags
app.registered_commands.sort(key=lambda command: COMMAND_ORDER.index(command.name)
                             if command.name in COMMAND_ORDER else len(COMMAND_ORDER))


def main() -> None:
    app()
