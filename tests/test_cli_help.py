"""Every command's help: -h works, enumerated options list their choices, flags show no type,
names are not cut short at 80 columns, and a wrong choice is one `error:` line with exit 2."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from autokernel.cli import app
from autokernel.cli._common import AgentChoice, Device, Dtype, SpeedupBaseline

runner = CliRunner()

COMMANDS = ("doctor", "profile", "run", "resume", "report", "verify", "export", "bench",
            "kernelbench")

# (command, option, its choices) for every enumerated option.
ENUMERATED = [
    *((command, "--device", "cuda|cpu") for command in
      ("profile", "run", "verify", "bench", "kernelbench")),
    *((command, "--dtype", "fp16|bf16|fp32") for command in ("profile", "run", "kernelbench")),
    *((command, "--agent", "auto|tuner|claude") for command in ("run", "resume", "kernelbench")),
    ("run", "--speedup-baseline", "best|eager|compile"),
    ("run", "--backend", "triton|cuda|auto"),
]


def _help(*args: str, columns: int = 200) -> str:
    result = runner.invoke(app, [*args, "-h"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    return result.output


def _option_rows(text: str, option: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(rf"│ {re.escape(option)}\b", line)]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_works_and_shows_no_bool_type(command: str) -> None:
    text = _help(command)
    assert "<bool>" not in text
    assert "Default:" not in text, "defaults are written one way: typer's [default: ...]"


def test_root_help_shows_no_bool_type() -> None:
    assert "<bool>" not in _help()


@pytest.mark.parametrize("command, option, choices", ENUMERATED,
                         ids=[f"{c}{o}" for c, o, _ in ENUMERATED])
def test_enumerated_options_list_their_choices(command: str, option: str, choices: str) -> None:
    rows = _option_rows(_help(command), option)
    assert rows, f"{command} has no {option}"
    assert choices in rows[0] and "<str>" not in rows[0], rows[0]


def test_every_choice_option_of_every_command_is_covered() -> None:
    """A new enumerated option shows up here: add it to ENUMERATED."""
    listed = set()
    for command in COMMANDS:
        for line in _help(command).splitlines():
            found = re.search(r"│ (--[\w-]+)\s+.*<(\w+(\|\w+)+)>", line)
            if found:
                listed.add((command, found.group(1)))
    assert listed == {(command, option) for command, option, _ in ENUMERATED}


@pytest.mark.parametrize("command, option", [(c, o) for c, o, _ in ENUMERATED],
                         ids=[f"{c}{o}" for c, o, _ in ENUMERATED])
def test_a_wrong_choice_is_one_line_and_exit_2(command: str, option: str) -> None:
    result = runner.invoke(app, [command, "x.py", option, "nonsense"])
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert len(text.splitlines()) == 1, text
    assert text.startswith("error:") and option in text and "'nonsense'" in text, text
    assert "choose one of" in text


@pytest.mark.parametrize("argv", [["run", "x.py", "--no-such-option"], ["run"],
                                  ["no-such-command"], ["run", "x.py", "--hours", "many"]],
                         ids=["unknown option", "missing argument", "unknown command",
                              "not a number"])
def test_other_usage_errors_are_one_line_and_exit_2(argv: list[str]) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert len(text.splitlines()) == 1 and text.startswith("error:"), text
    assert "Traceback" not in text and "╭" not in text


@pytest.mark.parametrize("command", ("run", "resume", "kernelbench"))
def test_option_names_are_whole_at_80_columns(command: str) -> None:
    text = _help(command, columns=80)
    assert "…" not in text, [line for line in text.splitlines() if "…" in line]


def test_run_help_is_grouped() -> None:
    text = _help("run", columns=80)
    for panel in ("Budget", "Move-on rules", "Agent", "Output"):
        assert f"─ {panel} ─" in text, panel
    for option, panel in (("--hours", "Budget"), ("--max-consecutive-reverts", "Move-on rules"),
                          ("--claude-model", "Agent"), ("--live", "Output")):
        before = text[:text.index(f"│ {option} ")]
        assert before.rindex("╭─ ") == before.rindex(f"╭─ {panel} "), (option, panel)


def test_choices_match_the_modules_that_use_them() -> None:
    """The CLI keeps its own copies so that --help stays fast; they must not drift."""
    from autokernel.agents import AGENT_NAMES
    from autokernel.ops.spec import DTYPES
    from autokernel.orchestrate import SPEEDUP_BASELINES

    assert {c.value for c in AgentChoice} == set(AGENT_NAMES)
    assert {c.value for c in Dtype} == set(DTYPES)
    assert {c.value for c in SpeedupBaseline} == set(SPEEDUP_BASELINES)
    assert {c.value for c in Device} == {"cuda", "cpu"}


def test_a_choice_reads_as_its_value() -> None:
    assert f"{Dtype.fp16}" == str(Dtype.fp16) == "fp16" and Dtype.fp16 == "fp16"


def test_the_plateau_option_says_which_experiments_count() -> None:
    """As the README states the rule: only phase=search rows count, explore samples do not."""
    text = " ".join(_help("run").split())
    start = text.index("--max-consecutive-reverts")
    described = text[start:text.index("--peak-fraction", start)]
    assert "phase=search" in described and "explore" in described, described
