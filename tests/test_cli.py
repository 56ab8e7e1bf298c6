"""The command shell: version and help, in-process and as the installed console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

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


def test_commands_are_listed_in_the_order_of_a_night_and_h_is_help() -> None:
    import re

    result = runner.invoke(app, ["-h"])
    assert result.exit_code == 0
    listed = re.findall(r"^│ ([a-z]+) ", result.output, flags=re.MULTILINE)
    assert listed == ["doctor", "profile", "run", "resume", "report", "verify", "export",
                      "bench", "kernelbench"], listed
    for command in listed:
        sub = runner.invoke(app, [command, "-h"])
        assert sub.exit_code == 0 and "Usage:" in sub.output, command


def test_console_script_is_installed() -> None:
    beside_python = Path(sys.executable).with_name("autokernel")
    exe = str(beside_python) if beside_python.exists() else shutil.which("autokernel")
    assert exe, "pip install should put `autokernel` on PATH"
    done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and __version__ in done.stdout
