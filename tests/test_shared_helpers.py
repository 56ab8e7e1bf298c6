"""The shared helpers every module writes files, durations and failures with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autokernel.files import atomic_write_text
from autokernel.text import error_summary, format_duration


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
