"""What measured figures are labelled with: software versions and the source commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from autokernel.versions import software_versions, source_commit


def test_software_versions_name_torch_and_triton() -> None:
    versions = software_versions()
    assert versions["torch"] == torch.__version__
    assert {"autokernel", "python", "triton"} <= set(versions)


def test_source_commit_prefers_the_callers_commit(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("COMMIT", "2a6eb51")
    assert source_commit(tmp_path) == "2a6eb51"


def test_source_commit_asks_git_and_flags_uncommitted_kernels(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.delenv("COMMIT", raising=False)
    assert source_commit(tmp_path) == "unknown"  # not a repository
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "autokernel").mkdir()
    (tmp_path / "autokernel" / "k.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    sha = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert source_commit(tmp_path) == sha
    (tmp_path / "autokernel" / "k.py").write_text("x = 2\n")
    assert source_commit(tmp_path) == f"{sha} + uncommitted changes"
