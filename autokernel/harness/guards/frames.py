"""Whose code a stack frame is: torch's, or the guards' own (the harness's reads and wrappers)."""

from __future__ import annotations

import os
from pathlib import Path

import torch


def _source_prefixes(module_file: str, directory: bool = True) -> tuple[str, ...]:
    """A module's location as code objects name it (the import path) and resolved (symlinks)."""
    path = Path(module_file)
    target = path.parent if directory else path
    forms = {str(target), str(target.resolve())}
    return tuple(f + os.sep if directory else f for f in forms)


_TORCH_PREFIXES = _source_prefixes(torch.__file__)
# Every module of this package, as guards.py alone was before it was split: a frame of the guards
# is the harness's own (the recorder's reads, the launch wrappers), never the candidate's.
_GUARD_FILES = tuple(form for module_file in sorted(Path(__file__).parent.glob("*.py"))
                     for form in _source_prefixes(str(module_file), directory=False))
