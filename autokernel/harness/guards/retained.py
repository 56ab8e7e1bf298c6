"""The tensors a candidate module holds in its state (a result cache kept across calls)."""

from __future__ import annotations

import functools
import os
import types
from pathlib import Path
from typing import Any

import torch

@functools.cache
def _library_roots() -> tuple[str, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.add(str(Path(__file__).parents[2]))  # the autokernel package (this is harness/guards/)
    return tuple({form for root in roots for form in (root, str(Path(root).resolve()))})


def _outside_libraries(module: types.ModuleType) -> bool:
    """A module loaded from a file outside the standard library, the installed packages and
    autokernel: the candidate (kernel files are loaded from a temporary directory)."""
    location = getattr(module, "__file__", None)
    if not isinstance(location, str):
        return False
    return _outside_library_path(location)


@functools.lru_cache(maxsize=4096)
def _outside_library_path(location: str) -> bool:
    # Remembered per path: the state guard asks after every call, and resolving a path is file
    # system calls (most of a fingerprint's time). A path is classified the first time it is seen.
    resolved = str(Path(location).resolve())
    return not any(p.startswith(root + os.sep) for root in _library_roots()
                   for p in (location, resolved))


def module_tensors(module: types.ModuleType, max_depth: int = 8) -> dict[int, str]:
    """Tensors reachable from a module's state, by id, each with where it is held: globals,
    containers, the defaults, closures and attributes of the module's own functions, the
    attributes of its own classes and their instances, and of its Triton kernels."""
    from triton.runtime.jit import KernelInterface

    own = module.__name__
    found: dict[int, str] = {}
    seen: set[int] = set()
    pending: list[tuple[Any, str, int]] = [(v, k, 0) for k, v in vars(module).items()
                                           if not k.startswith("__")]
    while pending:
        value, path, depth = pending.pop()
        if id(value) in seen or depth > max_depth or isinstance(value, types.ModuleType):
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            found.setdefault(id(value), path)
            continue
        children: list[tuple[Any, str]] = []
        if isinstance(value, dict):
            children = [(v, f"{path}[{k!r}]"[:80]) for k, v in value.items()]
            children += [(k, f"{path} key") for k in value]
        elif isinstance(value, (list, tuple, set, frozenset)) or type(value).__name__ == "deque":
            children = [(v, f"{path}[{i}]") for i, v in enumerate(value)]
        elif isinstance(value, types.FunctionType) and value.__module__ == own:
            cells = [c.cell_contents for c in value.__closure__ or () if _filled(c)]
            children = [(value.__defaults__, f"{path} defaults"),
                        (value.__kwdefaults__, f"{path} defaults"),
                        (cells, f"{path} closure"), (vars(value), path)]
        elif hasattr(value, "__wrapped__") and not isinstance(value, type):
            children = [(value.__wrapped__, path)]  # functools.cache and lru_cache wrappers
        elif isinstance(value, functools.partial):
            children = [(value.func, path), (value.args, path), (value.keywords, path)]
        elif isinstance(value, type) and value.__module__ == own:
            children = [(v, f"{path}.{k}") for k, v in vars(value).items()
                        if not k.startswith("__")]
        elif type(value).__module__ == own or isinstance(value, KernelInterface):
            children = [(v, f"{path}.{k}") for k, v in getattr(value, "__dict__", {}).items()]
        pending.extend((child, where, depth + 1) for child, where in children
                       if child is not None)
    return found


def _filled(cell: types.CellType) -> bool:
    try:
        return cell.cell_contents is not cell  # always True once bound
    except ValueError:  # an empty cell: the variable is not bound yet
        return False
