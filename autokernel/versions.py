"""The software a figure was measured with, recorded next to every plan, run and verify result."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path


def software_versions() -> dict[str, str]:
    """autokernel, Python, torch, triton and CUDA versions (those that are installed)."""
    import torch

    import autokernel

    versions = {"autokernel": autokernel.__version__, "python": platform.python_version(),
                "torch": torch.__version__}
    try:
        versions["triton"] = metadata.version("triton")
    except metadata.PackageNotFoundError:
        pass
    if torch.version.cuda:
        versions["cuda"] = str(torch.version.cuda)
    return versions


def source_commit(repo: str | Path = ".") -> str:
    """The commit the code under `repo` came from, for labelling measured figures.

    `$COMMIT` wins when set: a copy of a working tree (a remote GPU runner's, say) may carry a
    stale .git or none, and only the caller knows what was copied.
    """
    named = os.environ.get("COMMIT", "").strip()
    if named:
        return named
    try:
        done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=30, check=True)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--",
                                "autokernel"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")
