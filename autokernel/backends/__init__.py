"""The kernel languages autokernel judges, behind one interface (`interface.KernelBackend`).

Each backend is registered here by the module that defines its `BACKEND` object: one line per
backend. Modules are named, not imported, so that the harness and a worker process import a
backend's machinery (nvcc, ctypes) only when a kernel file of that language shows up, and so
that no backend's package is imported by the harness's modules.

Adding a backend: its own folder (`autokernel/<name>/`, with a `backend.py` defining
`BACKEND = <a KernelBackend>`), its starters, and one line in `BACKEND_MODULES`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autokernel.backends.interface import KernelBackend

# The language a kernel file declares (`BACKEND = "..."`) → the module defining its backend.
BACKEND_MODULES: dict[str, str] = {
    "triton": "autokernel.backends.triton",
    "cuda": "autokernel.cuda.backend",
}
BACKEND_NAMES: tuple[str, ...] = tuple(BACKEND_MODULES)
DEFAULT_BACKEND = "triton"


def backend(name: str) -> KernelBackend:
    """The backend of a kernel file's `BACKEND` (KeyError for a language not registered)."""
    return importlib.import_module(BACKEND_MODULES[name]).BACKEND


def all_backends() -> list[KernelBackend]:
    """Every registered backend, in registration order."""
    return [backend(name) for name in BACKEND_NAMES]
