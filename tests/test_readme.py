"""The README a new user follows: short, a quick start in the first screen whose commands exist,
links that resolve, and the blocks `.ci/run` executes unchanged (issue 16)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import typer.main

from autokernel.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FIRST_SCREEN = 40  # lines
QUICK_START = ("autokernel doctor",
               "autokernel run examples/models/tiny_llama.py --device cpu --hours 0.05",
               "autokernel report", "autokernel verify", "autokernel export")


def fenced_blocks(text: str, language: str) -> list[tuple[int, str]]:
    """(first line number, body) of each ```language block."""
    blocks, lines = [], text.splitlines()
    start = None
    for number, line in enumerate(lines, start=1):
        if start is None and line.strip() == f"```{language}":
            start = number
        elif start is not None and line.strip() == "```":
            blocks.append((start, "\n".join(lines[start:number - 1])))
            start = None
    return blocks


def shell_commands(text: str) -> list[str]:
    """Each command line of the README's bash blocks, without its comment."""
    return [line.split("  #")[0].strip() for _, body in fenced_blocks(text, "bash")
            for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_readme_is_short_and_starts_with_a_copy_pasteable_quick_start() -> None:
    text = README.read_text(encoding="utf-8")
    # Issue 29 added requirements, troubleshooting, the measured result and a Claude night's cost;
    # the measured result is a table with a row per target of the recorded run (five here).
    assert len(text.splitlines()) <= 200
    first_block_line, first_block = fenced_blocks(text, "bash")[0]
    assert first_block_line < FIRST_SCREEN
    assert "python3 -m venv .venv" in first_block and ".venv/bin/autokernel" in first_block
    for command in QUICK_START:
        assert command in first_block, command
    python_line, snippet = fenced_blocks(text, "python")[0]
    assert python_line < FIRST_SCREEN and "autokernel.load(" in snippet and ".patch(" in snippet
    assert len(snippet.splitlines()) <= 5
    assert "docs/loop.md#moving-on-and-the-plateau-rule" in text  # the rule, exactly, is there


def test_the_claude_nights_cost_is_the_codes_caps_at_the_default_models_price() -> None:
    from autokernel.benchmarks.claude_night_cost import night_cost

    text = " ".join(README.read_text(encoding="utf-8").split())
    cost = night_cost()
    for words in (f"at most ${cost.output_usd:.2f} of output per experiment",
                  f"${cost.output_usd * 100:.0f} per 100 experiments", f"({cost.model},",
                  f"${cost.output_per_mtok:g} per million output tokens",
                  f"cache reads (${cost.cache_read_per_mtok:.2f} per million)",
                  f"then at most {cost.requests - 1} requests",
                  f"at ${cost.input_per_mtok:g} per million"):
        assert words in text, words


def test_every_command_and_file_the_readme_names_exists() -> None:
    text = README.read_text(encoding="utf-8")
    real = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    named = {m.group(1) for line in shell_commands(text)
             for m in re.finditer(r"(?:^|&& |\s)autokernel ([a-z]+)", line)}
    assert named and named <= real, named - real
    for path in set(re.findall(r"examples/[\w/]+\.py", text)):
        assert (ROOT / path).is_file(), path
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target


def test_every_run_directory_the_readme_names_is_ignored_by_this_clone() -> None:
    """`autokernel run` refuses an --out inside a git work tree that does not ignore it, and a
    user follows the README from a clone of this repository: its --out folders must be ignored."""
    text = README.read_text(encoding="utf-8")
    outs = {m.group(1) for line in shell_commands(text)
            for m in re.finditer(r"--out (\S+)", line)}
    assert outs
    for out in outs:
        check = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", out + "/x"])
        assert check.returncode == 0, f"{out} is not ignored by .gitignore"


def test_the_ci_blocks_are_the_commands_ci_runs() -> None:
    """`.ci/run` finds its commands by the README's markers; they must stay exactly these."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    awk = re.search(r"awk -v marker=\"<!-- ci:\$1 -->\" '(.*?)' README.md", script, re.S)
    assert awk is not None

    def block(name: str) -> str:
        return subprocess.run(["awk", "-v", f"marker=<!-- ci:{name} -->", awk.group(1),
                               str(README)], capture_output=True, text=True,
                              check=True).stdout

    assert block("setup") == ('python3 -m venv .venv && .venv/bin/pip install -c '
                              'constraints/ci.txt -e ".[test,ray]"\n')
    assert block("test") == ".venv/bin/python -m pytest -n auto --dist worksteal\n"
