"""Pieces every command shares: the console, the one-line user error, device resolution."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)

USAGE_ERROR = 2


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    """Print a one-line error (no traceback) and exit with `code` (2: bad input)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def device_or_fail(requested: str | None) -> str:
    """Resolve --device, prepare the interpreter for cpu, or exit 2 with a one-line reason."""
    from autokernel.device import DeviceError, resolve_device, use_device

    try:
        device = resolve_device(requested)
        use_device(device)
    except DeviceError as exc:
        fail(str(exc))
    return device


DEVICE_HELP = "cuda or cpu (Triton interpreter). Default: cuda when a GPU is visible, else cpu."
