"""The shared helpers every module writes files, durations and failures with."""

from __future__ import annotations

import os
import re
import tokenize
from pathlib import Path

import pytest

from autokernel.files import atomic_write_text
from autokernel.text import error_summary, format_duration, format_latency, format_speedup


def test_atomic_write_replaces_the_file_and_leaves_no_scratch_file(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert os.stat(target).st_mode & 0o777 == 0o644
    atomic_write_text(target, "newer", durable=False)
    assert target.read_text() == "newer"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_failed_atomic_write_keeps_the_old_content(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "cache.json"
    target.write_text("old")

    def fail_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail_replace)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["cache.json"]


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0 s"), (12.4, "12 s"), (59, "59 s"), (60, "1.0 min"), (210, "3.5 min"),
    (3600, "1.0 h"), (7200, "2.0 h"),
])
def test_format_duration_uses_the_largest_unit_reached(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_error_summary_is_the_type_and_first_line() -> None:
    assert error_summary(ValueError("bad shape\nstack detail")) == "ValueError: bad shape"
    assert error_summary(RuntimeError("  \n")) == "RuntimeError"
    assert error_summary(KeyError()) == "KeyError"
    assert error_summary(ValueError("x" * 50), limit=10) == "ValueError: " + "x" * 10


@pytest.mark.parametrize("ratio, text", [(None, "–"), (1.184, "1.18×"), (0.1, "0.10×"),
                                         (0.00081234, "0.00081×")])
def test_format_speedup_keeps_two_digits_that_mean_something(ratio: float | None,
                                                             text: str) -> None:
    assert format_speedup(ratio) == text


@pytest.mark.parametrize("us, text", [(None, "–"), (41.24, "41.2 µs"), (999.9, "999.9 µs"),
                                      (76814.5, "76.81 ms")])
def test_format_latency_writes_microseconds_then_milliseconds(us: float | None, text: str) -> None:
    assert format_latency(us) == text


def test_speedups_and_latencies_are_formatted_in_one_place() -> None:
    """The report, the dashboard, the log, verify and kernelbench wrote them each their own way
    (0.01× vs 0.1× thresholds; ms from 1 ms or from 10 ms, with 1, 2 or 3 decimals)."""
    import autokernel

    package = Path(autokernel.__file__).parent
    copies = [str(path.relative_to(package)) for path in package.rglob("*.py")
              if path.name != "text.py" and re.search(
                  r"^def (_?times|_x|_us|latency_text)\(", path.read_text(), re.MULTILINE)]
    assert copies == []


def test_the_morning_commands_write_counts_in_the_right_number() -> None:
    """'2 module(s), 2 call(s)', '5 kernel(s)': everything the package prints uses text.count_of
    (the export inlines text.py first, so the routing report can too)."""
    import autokernel

    package = Path(autokernel.__file__).parent
    plural_by_suffix = re.compile(r"[a-z]\(s\)")
    text_tokens = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    offenders = []
    for path in package.rglob("*.py"):
        with path.open("rb") as source:
            strings = [token.string for token in tokenize.tokenize(source.readline)
                       if token.type in text_tokens
                       and not token.string.startswith(('"""', "'''"))]  # docstrings
        offenders += [f"{path.relative_to(package)}: {text}" for text in strings
                      if plural_by_suffix.search(text)]
    assert offenders == []
