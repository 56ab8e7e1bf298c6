"""The command shell: version and help, in-process and as the installed console script."""

from __future__ import annotations

import shutil
import subprocess

from typer.testing import CliRunner

from autokernel import __version__
from autokernel.cli import app

runner = CliRunner()


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"autokernel {__version__}"


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("doctor", "profile", "bench", "run", "resume"):
        assert command in result.output


def test_console_script_is_installed() -> None:
    exe = shutil.which("autokernel")
    assert exe, "pip install should put `autokernel` on PATH"
    done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and __version__ in done.stdout
