"""`IdentitySnapshot`: torch, triton, the clock and the harness by identity, and the
process-wide state a candidate could change without replacing anything."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from autokernel.harness.guards.ops import dispatch_tables, tables_before_candidates
from autokernel.harness.guards.retained import _outside_libraries, module_tensors

# Rebound by torch itself when torch._dynamo is first imported (it wraps manual_seed), which
# may happen lazily after the snapshot; the harness never calls it.
TORCH_REBINDS_LAZILY: frozenset[str] = frozenset({"torch.manual_seed"})


@dataclass
class IdentitySnapshot:
    """The callables of a set of namespaces, by identity, to catch replacement; and, with
    `watch_process`, the process-wide state a candidate could change without replacing anything:
    torch.library registrations, the dispatcher's aten tables, Triton's launch hooks, and the
    tensors the candidate's module holds.

    The first `changes()` after the candidate's import settles which modules are the
    candidate's (those imported since `take` from outside the installed libraries, or the ones
    given to `watch_module`) and which tensors they held at import; a tensor they hold after a
    later call was made at call time."""

    entries: dict[str, tuple[Any, dict[str, Any], bool]] = field(default_factory=dict)
    registrations: RegistrationWatch | None = None
    registrations_seen: int = 0
    tables: dict[str, str] = field(default_factory=dict)
    knobs: dict[str, Any] = field(default_factory=dict)
    modules_before: frozenset[str] = frozenset()
    watched: list[types.ModuleType] = field(default_factory=list)
    import_tensors: set[int] = field(default_factory=set)
    settled: bool = False

    @classmethod
    def take(cls, namespaces: dict[str, Any], watch_process: bool = True) -> IdentitySnapshot:
        snapshot = cls()
        for label, namespace in namespaces.items():
            if namespace is None:
                continue
            is_class = isinstance(namespace, type)
            saved = {k: v for k, v in vars(namespace).items()
                     if (callable(v) or isinstance(v, (staticmethod, classmethod, property)))
                     and f"{label}.{k}" not in TORCH_REBINDS_LAZILY}
            snapshot.entries[label] = (namespace, saved, is_class)
        if watch_process:
            snapshot.registrations = watch_registrations()
            snapshot.registrations_seen = len(snapshot.registrations.made)
            snapshot.tables = tables_before_candidates()
            snapshot.knobs = knob_hooks()
            snapshot.modules_before = frozenset(sys.modules)
        return snapshot

    def watch_module(self, module: types.ModuleType) -> None:
        """Check `module`'s state for tensors kept across calls (those it holds now are its
        import-time constants)."""
        self.watched.append(module)
        self.import_tensors |= set(module_tensors(module))

    def changes(self) -> list[str]:
        """'torch.softmax replaced', ... (empty when nothing changed)."""
        missing = object()
        found: list[str] = []
        for label, (namespace, saved, is_class) in self.entries.items():
            current = vars(namespace)
            for name, value in saved.items():
                now = current.get(name, missing)
                if now is missing:
                    found.append(f"{label}.{name} deleted")
                elif now is not value:
                    found.append(f"{label}.{name} replaced")
            if is_class:
                # A new class attribute can shadow an inherited method (Tensor.add = f).
                added = [k for k, v in current.items() if k not in saved and callable(v)]
                found.extend(f"{label}.{name} added" for name in added)
        if self.registrations is not None:
            found.extend(self._registration_changes())
            found.extend(f"triton.knobs.runtime.{name} set (a Triton launch hook)"
                         for name, value in knob_hooks().items()
                         if value != self.knobs.get(name))
            found.extend(self._retained_tensors())
        return found

    def _registration_changes(self) -> list[str]:
        watch = self.registrations
        assert watch is not None
        found = []
        if torch._C._dispatch_library is not watch.wrapper:
            found.append("torch._C._dispatch_library replaced")
        made = watch.made[self.registrations_seen:]
        found.extend(f"{entry} created (an operator or kernel registered by kernel.py)"
                     for entry in made)
        if made or not self.settled:
            now = dispatch_tables()
            found.extend(f"aten::{name[6:]} dispatcher kernels changed"
                         for name, table in now.items() if self.tables.get(name, table) != table)
        return found

    def _retained_tensors(self) -> list[str]:
        if not self.settled:
            self.settled = True
            for name in sorted(set(sys.modules) - self.modules_before):
                module = sys.modules.get(name)
                if module is not None and _outside_libraries(module):
                    self.watch_module(module)
            return []
        held = [path for module in self.watched
                for identity, path in module_tensors(module).items()
                if identity not in self.import_tensors]
        if not held:
            return []
        return [(f"kernel.py keeps tensors made at call time in its module state "
                 f"({', '.join(held[:3])}): a result cache or an output pool "
                 "[call-time-state]")]


@dataclass
class RegistrationWatch:
    """Every `torch.library` registration made in this process since the watch was installed:
    Library(...), custom_op, triton_op, define/impl/register_* all create their C++ library
    through `torch._C._dispatch_library`, which `wrapper` replaces."""

    wrapper: Callable[..., Any]
    made: list[str]


_REGISTRATION_WATCH: list[RegistrationWatch] = []


def watch_registrations() -> RegistrationWatch:
    """Install the registration watch once per process (idempotent)."""
    if _REGISTRATION_WATCH and torch._C._dispatch_library is _REGISTRATION_WATCH[0].wrapper:
        return _REGISTRATION_WATCH[0]
    original = torch._C._dispatch_library
    made: list[str] = []

    def dispatch_library(kind: Any, namespace: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(f"torch.library.Library({namespace!r}, {str(kind).split('.')[-1]!r})")
        return original(kind, namespace, *args, **kwargs)

    torch._C._dispatch_library = dispatch_library
    watch = RegistrationWatch(dispatch_library, made)
    _REGISTRATION_WATCH[:] = [watch]
    return watch


KNOB_HOOKS: tuple[str, ...] = (
    "launch_enter_hook", "launch_exit_hook", "kernel_load_start_hook", "kernel_load_end_hook",
    "jit_cache_hook", "jit_post_compile_hook", "add_stages_inspection_hook",
)


def knob_hooks() -> dict[str, Any]:
    """What Triton would call around each launch or compile (hook chains by their members)."""
    try:
        from triton import knobs
    except ImportError:  # pragma: no cover - triton < 3.4 has no knobs
        return {}
    found = {}
    for name in KNOB_HOOKS:
        value = getattr(knobs.runtime, name, None)
        members = getattr(value, "calls", None)
        found[name] = tuple(members) if isinstance(members, list) else value
    return found
