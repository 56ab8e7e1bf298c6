"""The starters as a benchmark loads them: a kernel file imported as a module of its own, and a
starter's source as committed at a git revision (to time a change against what came before)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from autokernel.benchmarks.record import REPO
from autokernel.kernels import starter_path


def load_file_as_module(path: Path, name: str) -> ModuleType:
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # Triton reads a kernel's source through its module
    module_spec.loader.exec_module(module)
    return module


def starter_source_at(rev: str, kernel_type: str) -> str | None:
    """The starter's source as committed at `rev`; None if the file did not exist there."""
    relative = starter_path(kernel_type).relative_to(REPO).as_posix()
    shown = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{relative}"],
                           capture_output=True, text=True, check=False)
    return shown.stdout if shown.returncode == 0 else None
