"""Pieces every command shares: the console, the one-line user error, device resolution, the
choices of the enumerated options, and the command classes that render help and usage errors."""

from __future__ import annotations

import re
import sys
from enum import Enum
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

console = Console()
err_console = Console(stderr=True)

USAGE_ERROR = 2


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    """Print a one-line error (no traceback) and exit with `code` (2: bad input)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def device_or_fail(requested: str | None, *, say_choice: bool = True) -> str:
    """Resolve --device, prepare the interpreter for cpu, or exit 2 with a one-line reason.
    Without --device, say which device was picked and why (on stderr: stdout may be JSON)."""
    from autokernel.device import DeviceError, device_choice_line, resolve_device, use_device

    try:
        device = resolve_device(requested)
        use_device(device)
    except DeviceError as exc:
        fail(str(exc))
    if requested is None and say_choice:
        err_console.print(device_choice_line(device), highlight=False)
    return device


def progress_steps(text: str, out: Any = None) -> Any:
    """`with progress_steps("profiling model.py") as steps: ...; steps.step("ranking")`, on the
    commands' console unless `out` says otherwise."""
    from autokernel.pipeline.progress import progress_steps as console_steps

    return console_steps(text, out if out is not None else console)


# ---------------------------------------------------------------------------------------------
# Enumerated options. str-valued, so a value compares equal to its name downstream; commands
# still turn them into plain strings (`plain`) before they reach run.json or a worker process.
# Kept here rather than imported from agents/orchestrate/ops so that `--help` stays fast; a test
# checks that they match those modules' lists.


class StrChoice(str, Enum):
    """An option's choices; prints as its value (a mixed-in str Enum's default is `Cls.name`)."""

    def __str__(self) -> str:
        return str(self.value)

    __format__ = str.__format__


class Device(StrChoice):
    cuda = "cuda"
    cpu = "cpu"


class Dtype(StrChoice):
    fp16 = "fp16"
    bf16 = "bf16"
    fp32 = "fp32"


class Backend(StrChoice):
    triton = "triton"
    cuda = "cuda"
    auto = "auto"


class AgentChoice(StrChoice):
    auto = "auto"
    tuner = "tuner"
    claude = "claude"


class SpeedupBaseline(StrChoice):
    best = "best"
    eager = "eager"
    compile = "compile"


ChoiceValue = TypeVar("ChoiceValue", bound=str)


def plain(choice: ChoiceValue | None) -> str | None:
    """The option's value as a plain str (None stays None)."""
    if choice is None:
        return None
    return str(choice.value) if isinstance(choice, Enum) else str(choice)


# Where a default is worked out at run time, help shows it as typer's "[default: (…)]" too, so
# every default reads the same way.
DEVICE_DEFAULT = "cuda when a GPU is visible, else cpu"
DTYPE_DEFAULT = "fp16 on cuda, fp32 on cpu"

DEVICE_HELP = "cuda, or cpu (the Triton interpreter)."

# Options several commands share, declared once (typer reads these as defaults, never mutates them).
DEVICE_OPTION: Any = typer.Option(None, "--device", help=DEVICE_HELP,
                                  show_default=DEVICE_DEFAULT)
DTYPE_OPTION: Any = typer.Option(None, "--dtype", help="Parameters and floating inputs.",
                                 show_default=DTYPE_DEFAULT)
MODEL_FILE_ARGUMENT: Any = typer.Argument(..., metavar="MODEL.py", help="Model file: class "
                                          "Model, get_inputs(), optional get_init_inputs() "
                                          "(KernelBench convention).")
CLASS_NAME_OPTION: Any = typer.Option("Model", "--class-name",
                                      help="The nn.Module class to build.")

# Help panels of `run`, `resume` and `kernelbench` (options without one stay under "Options").
PANEL_BUDGET = "Budget"
PANEL_MOVE_ON = "Move-on rules"
# Apart from the other rules: its choices are too wide to share a panel with their long names
# at 80 columns, where rich would cut the names short.
PANEL_SPEEDUP = "Target speedup"
PANEL_HARNESS = "Harness"
PANEL_AGENT = "Agent"
PANEL_OUTPUT = "Output"


# ---------------------------------------------------------------------------------------------
# Help and usage errors


def _hide_flag_types(params: list[Any]) -> list[Any]:
    # typer prints a flag's type as "<bool>": noise, since a flag takes no value.
    for param in params:
        if getattr(param, "is_flag", False) and getattr(param, "metavar", None) is None:
            param.metavar = ""
    return params


def _choices_of(param: Any) -> list[str]:
    """The choices of an enumerated option ([] for any other), across typer's versions."""
    for holder in (getattr(param, "type_descriptor", None), getattr(param, "type", None)):
        choices = getattr(holder, "choices", None)
        if choices:
            return [str(c.value) if isinstance(c, Enum) else str(c) for c in choices]
    return []


def usage_error_line(exc: Any) -> str:
    """typer's usage error (bad option value, unknown option, missing argument) as one line, in
    the words of the commands' own errors."""
    param = getattr(exc, "param", None)
    choices = _choices_of(param) if param is not None else []
    names = [n for n in getattr(param, "opts", ()) if n.startswith("--")]
    if choices and names:
        noun = names[0].lstrip("-").replace("-", " ")
        given = re.search(r"('.*?'|\".*?\") is not one of", exc.message or "")
        value = f" {given.group(1)}" if given else ""
        return f"{names[0]}: unknown {noun}{value}; choose one of: {', '.join(choices)}"
    message = " ".join(exc.format_message().split()).rstrip(".")
    if message[:1].isupper() and message[1:2].islower():
        message = message[0].lower() + message[1:]
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        message += f"; see {ctx.command_path} -h"
    return message


class AutokernelCommand(TyperCommand):
    """A command whose help shows no type for flags."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _hide_flag_types(super().get_params(ctx))


class AutokernelGroup(TyperGroup):
    """The root command: flags without a type in help, and every usage error (wrong choice,
    unknown option, missing argument) as one `error:` line with exit status 2, like the
    commands' own input checks, instead of typer's framed panel."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _hide_flag_types(super().get_params(ctx))

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:  # recent typer carries its own copy of click
            from typer._click.exceptions import ClickException
        except ImportError:
            from click.exceptions import ClickException

        try:
            outcome = super().main(args, prog_name, complete_var, standalone_mode=False,
                                   **extra)
        except ClickException as exc:
            # `autokernel` alone raises NoArgsIsHelpError once the help is printed.
            if type(exc).__name__ != "NoArgsIsHelpError":
                err_console.print(f"[bold red]error:[/] {escape(usage_error_line(exc))}",
                                  highlight=False, soft_wrap=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            err_console.print("aborted", highlight=False)
            sys.exit(1)
        # Without standalone mode typer returns an Exit's status instead of exiting.
        sys.exit(outcome if isinstance(outcome, int) else 0)
