"""State a candidate keeps in its functions' default arguments and closures.

A call counter needs no module-level name: `def kernel_fn(x, _calls=itertools.count())`, a
`nonlocal n` in a factory's closure, or a list in a default that grows each call, switch a
kernel to a cheaper path once the checked calls are over. Like module-level state written at
call time, that is refused: `CallableState` fingerprints, after the import, every default and
every closure cell of the functions the candidate's module defines (reached from its globals, its
classes, and other functions' defaults and cells), and any later change of one of them (a
rebinding, an advanced iterator or generator, a container changed, a tensor written in place) is
call-time state. Triton's own objects (a JITFunction's or an autotuner's caches) are not looked
into: they fill on first use in every honest kernel.
"""

from __future__ import annotations

import functools
import types
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

MAX_ITEMS = 64
MAX_DEPTH = 6


def _fingerprint(value: Any, depth: int = 0) -> Any:
    """What changes when `value`'s state changes (identity for what cannot change)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return (type(value).__name__, value)
    if isinstance(value, torch.Tensor):
        return ("tensor", id(value), value._version)
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type,
                          types.ModuleType)) or depth >= MAX_DEPTH:
        return ("id", id(value))
    if _is_triton(value):
        return ("triton", id(value))
    if isinstance(value, types.GeneratorType):
        frame = value.gi_frame
        return ("generator", id(value), None if frame is None else frame.f_lasti)
    if isinstance(value, (list, tuple, set, frozenset)) or type(value).__name__ == "deque":
        items = list(value)
        return (type(value).__name__, id(value), len(items),
                tuple(_fingerprint(v, depth + 1) for v in items[:MAX_ITEMS]))
    if isinstance(value, dict):
        items = list(value.items())[:MAX_ITEMS]
        return ("dict", id(value), len(value),
                tuple((_fingerprint(k, depth + 1), _fingerprint(v, depth + 1)) for k, v in items))
    if isinstance(value, bytearray):
        return ("bytearray", id(value), bytes(value[:4096]))
    if hasattr(value, "__next__"):  # itertools' iterators and the like show their state here
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return ("iterator", id(value), repr(value.__reduce__()))
            except Exception:
                return ("iterator", id(value), repr(value))
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        return ("object", id(value), _fingerprint(attributes, depth + 1))
    return ("id", id(value), repr(value)[:200])


def _is_triton(value: Any) -> bool:
    module = type(value).__module__ or ""
    return module.startswith("triton.")


@dataclass
class CallableState:
    """The defaults and closure cells of a module's own functions, fingerprinted."""

    module_name: str
    functions: dict[str, types.FunctionType] = field(default_factory=dict)
    prints: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def take(cls, module: types.ModuleType) -> CallableState:
        state = cls(module.__name__)
        state.functions = _own_functions(module)
        state.prints = state._current()
        return state

    def _current(self) -> dict[str, Any]:
        prints: dict[str, Any] = {}
        for path, fn in self.functions.items():
            prints[f"{path} defaults"] = _fingerprint(fn.__defaults__)
            prints[f"{path} keyword defaults"] = _fingerprint(fn.__kwdefaults__)
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
                try:
                    content = cell.cell_contents
                except ValueError:
                    content = "<empty cell>"
                prints[f"{path} closure {name!r}"] = _fingerprint(content)
        return prints

    def changes(self) -> list[str]:
        now = self._current()
        return [f"{where} changed between calls (a counter or cache in a default argument or a "
                f"closure) [call-time-state]" for where, value in now.items()
                if self.prints.get(where) != value]


def _own_functions(module: types.ModuleType) -> dict[str, types.FunctionType]:
    """The module's own functions, by a path naming where they were found."""
    own = module.__name__
    found: dict[str, types.FunctionType] = {}
    seen: set[int] = set()
    pending: list[tuple[Any, str, int]] = [(v, k, 0) for k, v in vars(module).items()
                                           if not k.startswith("__")]
    while pending:
        value, path, depth = pending.pop()
        if id(value) in seen or depth > MAX_DEPTH or isinstance(value, types.ModuleType) \
                or _is_triton(value):
            continue
        seen.add(id(value))
        children: list[tuple[Any, str]] = []
        if isinstance(value, types.FunctionType):
            if value.__module__ != own:
                continue
            found[path] = value
            cells = []
            for cell in value.__closure__ or ():
                try:
                    cells.append(cell.cell_contents)
                except ValueError:
                    continue
            children = [(v, path) for v in (*(value.__defaults__ or ()),
                                            *(value.__kwdefaults__ or {}).values(), *cells)]
        elif isinstance(value, (staticmethod, classmethod)):
            children = [(value.__func__, path)]
        elif isinstance(value, property):
            children = [(f, path) for f in (value.fget, value.fset, value.fdel) if f is not None]
        elif isinstance(value, functools.partial):
            children = [(value.func, path), *((a, path) for a in value.args)]
        elif hasattr(value, "__wrapped__") and not isinstance(value, type):
            children = [(value.__wrapped__, path)]
        elif isinstance(value, type) and value.__module__ == own:
            children = [(v, f"{path}.{k}") for k, v in vars(value).items()
                        if not k.startswith("__") or k == "__call__"]
        elif isinstance(value, (list, tuple)):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(value[:MAX_ITEMS])]
        elif isinstance(value, dict):
            children = [(v, f"{path}[{k!r}]"[:80]) for k, v in list(value.items())[:MAX_ITEMS]]
        pending.extend((child, where, depth + 1) for child, where in children)
    return found
