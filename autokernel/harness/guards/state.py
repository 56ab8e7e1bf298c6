"""State a candidate keeps across calls: in its module's globals, defaults, closures, objects.

A call counter can live anywhere the candidate's module reaches: an int or list in a global, a dict
written through `operator.setitem`, `functools.partial(next, itertools.count())`, a list handed to
a helper that appends to its parameter, a default `_calls=itertools.count()`, a `nonlocal n`, an
attribute of a function or of an instance, a generator's frame. Such a kernel switches to a cheaper
path once the checked calls are over. `CallableState` fingerprints, after the import and after
every guarded call (and the timed batches, at the next request), everything reachable from the
module's globals that the candidate itself owns, with no depth cap and no item cap (cycles and
shared objects are followed once): plain values, containers (read through the base type's own
methods, so an override cannot hide an item), the defaults, closure cells, attributes and code of
the module's functions (a function is the module's when its `__globals__` is the module's
namespace), bound methods, partials, iterators (their `__reduce__`, which shows an
`itertools.count`'s position or a list iterator's index), generators (their frame's position and
locals), the attributes and slots of the module's classes and their instances, the attributes of
other plain objects (a `SimpleNamespace`), and the state of the stdlib's stateful objects
(`random.Random`, `array`, `deque`). What is not looked into: Triton's and torch's own objects (a
JITFunction's or an autotuner's caches fill on first use in every honest kernel; a class is
believed to be theirs only when it is found at its claimed module path and none of its functions is
the candidate's), modules, and tensors (identity and version counter only: the retained-tensor
check sees tensors made at call time).

Honest kernels fill caches once per shape (`functools.lru_cache`'d launch plans, a dict of
configurations keyed by shape). The rule that tells those from counters: the judge calls the
kernel again with the same signature (shapes, strides, dtypes, devices, storage offsets, pointer
alignment, the plain arguments: the ghost replay, the determinism repeat, the timed calls), and
a cache keyed by what the call is does not change then. So after a call whose signature was
seen before, nothing may have changed at all; after a call with a new signature only growth is
allowed: a dict or set gains entries (its existing ones unchanged, recursively), an
`lru_cache` holds more entries, a global that was None is set (a lazy initialisation). A value
rewritten, an iterator advanced, a list appended to, a tensor written in place: call-time state,
whenever it happens. A module whose state is too large to fingerprint (`MAX_NODES`) is refused
rather than checked in part.
"""

from __future__ import annotations

import collections
import contextvars
import functools
import gc
import sys
import types
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from autokernel.harness.guards.retained import _outside_libraries

MAX_NODES = 200_000
TOO_LARGE = "too large"

# Foreign objects whose state is read through `__reduce_ex__` (their state lives in C).
STATEFUL_MODULES = frozenset({"itertools", "functools", "operator", "collections", "_collections",
                              "builtins", "array", "random", "_random", "types", "enum"})
PRIMITIVES = (bool, int, float, complex, str, bytes, type(None))
_LRU_WRAPPER = type(functools.lru_cache(maxsize=None)(lambda: None))


def _lru_link_type() -> type | None:
    """The type of a bounded lru_cache's list links (not importable by name)."""
    bounded = functools.lru_cache(maxsize=2)(lambda a: a)
    bounded(0)
    return next((r for r in gc.get_referents(bounded) if isinstance(r, type)
                 and r.__name__ == "_lru_list_elem"), None)


_LRU_LINK = _lru_link_type()
_GENERATORS = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)


_UNSET = object()
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made at run time (by a class statement)


class _TooLarge(Exception):
    pass


def call_signature(args: Iterable[Any]) -> tuple[Any, ...]:
    """What an honest cache may key on: each tensor's shape, strides, dtype, device, storage
    offset and pointer alignment, and the plain arguments' values."""
    found: list[Any] = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            found.append(("tensor", tuple(arg.shape), tuple(arg.stride()), str(arg.dtype),
                          str(arg.device), arg.storage_offset(), arg.data_ptr() % 16))
        elif isinstance(arg, (list, tuple)):
            found.append((type(arg).__name__, call_signature(arg)))
        elif type(arg) in PRIMITIVES:
            found.append((type(arg).__name__, repr(arg)))
        else:
            found.append(("object", type(arg).__qualname__, repr(arg)[:200]))
    return tuple(found)


class _Walker:
    """One fingerprint of a module's state (a fresh walker per snapshot)."""

    def __init__(self, module: types.ModuleType) -> None:
        self.namespace = vars(module)
        self.own = module.__name__
        self.memo: dict[int, Any] = {}
        self.keep: list[Any] = []  # alive while walking, so no id is reused
        self.nodes = 0
        self.own_types: dict[int, bool] = {}

    def walk(self) -> Any:
        items = [(k, v) for k, v in dict.items(self.namespace)
                 if not (isinstance(k, str) and k.startswith("__") and k.endswith("__"))]
        return ("dict", id(self.namespace),
                tuple((("v", "str", k), self.print(v)) for k, v in items))

    def print(self, value: Any) -> Any:
        """What changes when `value`'s state changes. An object reached twice gets the same
        print (whatever the order it is reached in); one reached again while its own print is
        being made (a cycle) is named by identity."""
        kind = type(value)
        if kind in PRIMITIVES:
            return ("v", kind.__name__, float.__repr__(value) if kind is float else value)
        known = self.memo.get(id(value))
        if known is not None:
            return known
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _TooLarge
        self.memo[id(value)] = ("ref", id(value))
        self.keep.append(value)
        found = self._print(value, kind)
        self.memo[id(value)] = found
        return found

    def _print(self, value: Any, kind: type) -> Any:
        if kind in (dict, list, tuple, set, frozenset):
            return self._contents(value)
        if issubclass(kind, torch.Tensor):
            # An inference tensor (one made under the inference_mode context) keeps no version
            # counter: its identity and attributes are what is seen of it.
            version = None if torch.Tensor.is_inference(value) else value._version
            return ("tensor", id(value), version, self._attributes(value))
        if issubclass(kind, contextvars.ContextVar):
            held = value.get(_UNSET)
            return ("contextvar", id(value), ("unset",) if held is _UNSET else self.print(held))
        if kind is types.ModuleType and not self._library_module(value):
            return ("module", id(value), self._attributes(value))  # one the candidate made
        if kind in (types.ModuleType, types.BuiltinFunctionType, types.CodeType):
            owner = getattr(value, "__self__", None)
            if kind is types.BuiltinFunctionType and owner is not None \
                    and not isinstance(owner, types.ModuleType):
                return ("builtin", id(value), self.print(owner))  # [].append's list
            return ("id", id(value))
        if issubclass(kind, types.FunctionType):
            return self._function(value)
        if issubclass(kind, type):
            return self._class(value)
        if kind is _LRU_WRAPPER:
            return ("lru", id(value), value.cache_info().currsize, self._attributes(value),
                    self._lru_entries(value))
        if issubclass(kind, _GENERATORS):
            frame = getattr(value, "gi_frame", None) or getattr(value, "cr_frame", None) \
                or getattr(value, "ag_frame", None)
            if frame is None:
                return ("generator", id(value), None)
            return ("generator", id(value), frame.f_lasti, self.print(dict(frame.f_locals)))
        if issubclass(kind, types.MethodType):
            return ("method", id(value), self.print(value.__self__), self.print(value.__func__))
        if issubclass(kind, (staticmethod, classmethod)):
            return ("wrapper", id(value), self.print(value.__func__))
        if issubclass(kind, property):
            return ("property", id(value), self.print((value.fget, value.fset, value.fdel)))
        if kind is functools.partial:
            return ("partial", id(value), self.print(value.func), self.print(value.args),
                    self.print(value.keywords), self._attributes(value))
        if self._foreign_library(kind) and _type_attr(kind, "__module__").split(".")[0] in (
                "triton", "torch"):
            # Triton's and torch's own objects: only what the candidate put on them (attributes
            # their own code never names), since their caches fill on first use.
            return ("library", id(value), self._attributes(value, _library_names(kind)))
        contents = self._contents(value)
        return ("object", id(value), id(kind), contents, self._attributes(value),
                self._reduced(value, kind))

    def _function(self, fn: types.FunctionType) -> Any:
        if fn.__globals__ is not self.namespace:
            return ("id", id(fn))
        cells = []
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                cells.append((("v", "str", name), self.print(cell.cell_contents)))
            except ValueError:
                cells.append((("v", "str", name), ("empty",)))
        return ("function", id(fn), id(fn.__code__), self.print(fn.__defaults__),
                self.print(fn.__kwdefaults__), ("dict", 0, tuple(cells)), self._attributes(fn))

    def _class(self, cls: type) -> Any:
        if not self._owned(cls):
            return ("id", id(cls))
        members = [(k, v) for k, v in dict(_type_attr(cls, "__dict__")).items()
                   if k not in ("__dict__", "__weakref__", "__doc__", "__module__")]
        return ("class", id(cls),
                ("dict", 0, tuple((("v", "str", k), self.print(v)) for k, v in members)))

    def _contents(self, value: Any) -> Any:
        """A container's items, read through the base type (an override hides nothing)."""
        kind = type(value)
        if issubclass(kind, dict):
            items = list(dict.items(value))
            factory = collections.defaultdict.default_factory.__get__(value) \
                if issubclass(kind, collections.defaultdict) else None
            return ("dict", id(value), tuple((self.print(k), self.print(v)) for k, v in items),
                    self.print(factory))
        if issubclass(kind, (set, frozenset)):
            prints = [self.print(v) for v in (set.__iter__(value) if issubclass(kind, set)
                                              else frozenset.__iter__(value))]
            return ("set", id(value), frozenset(prints))
        if issubclass(kind, list):
            return ("list", id(value), tuple(self.print(v) for v in list.__iter__(value)))
        if issubclass(kind, tuple):
            return ("tuple", tuple(self.print(v) for v in tuple.__iter__(value)))
        if issubclass(kind, bytearray):
            return ("bytes", bytes(bytearray.copy(value)))
        if issubclass(kind, collections.deque):
            return ("list", id(value), tuple(self.print(v)
                                             for v in collections.deque.__iter__(value)))
        for base in PRIMITIVES:
            if issubclass(kind, base) and base is not type(None):
                return ("v", base.__name__, base.__repr__(value))
        return None

    def _lru_entries(self, wrapper: Any) -> Any:
        """An lru_cache's entries (a cached helper's results are module state too: a list it
        hands out can count calls), in no particular order (a hit reorders a bounded cache).
        CPython's wrapper shows them to the garbage collector only: the cache dict (unbounded)
        or, for each link of its list, the link's key, result and type (bounded)."""
        referents = gc.get_referents(wrapper)
        pairs: list[tuple[Any, Any]] = []
        if wrapper.cache_parameters()["maxsize"] is None:
            caches = [r for r in referents if type(r) is dict and r is not
                      getattr(wrapper, "__dict__", None)]
            pairs = list(dict.items(caches[0])) if caches else []
        else:  # the wrapper's type, then key, result and type of each link
            i = 1
            while i + 2 < len(referents) and referents[i + 2] is _LRU_LINK:
                pairs.append((referents[i], referents[i + 1]))
                i += 3
        prints = [(self.print(k), self.print(v)) for k, v in pairs]
        return ("dict", 0, tuple(sorted(prints, key=repr)))

    def _attributes(self, value: Any, skip: frozenset[str] = frozenset()) -> Any:
        attributes = _instance_dict(value)
        found = [] if attributes is None else \
            [(self.print(k), self.print(v)) for k, v in dict.items(attributes) if k not in skip]
        for cls in _type_attr(type(value), "__mro__"):
            members = _type_attr(cls, "__dict__")
            slots = members.get("__slots__", ())
            for name in (slots,) if type(slots) is str else slots if type(slots) in (
                    tuple, list) else ():
                descriptor = members.get(name)
                if type(descriptor) is types.MemberDescriptorType:
                    try:
                        found.append((("slot", name), self.print(descriptor.__get__(value))))
                    except AttributeError:
                        found.append((("slot", name), ("empty",)))
        return ("dict", 0, tuple(found))

    def _reduced(self, value: Any, kind: type) -> Any:
        """The state of the stdlib's C objects (an itertools.count's position), also under a
        subclass of the candidate's (through the C base's own __reduce__: no override runs)."""
        if self._owned(kind):
            bases = [c for c in _type_attr(kind, "__mro__")[1:]
                     if not self._owned(c) and c is not object]
            method = _type_attr(bases[0], "__dict__").get("__reduce__") if bases else None
            if bases and bases[0] in (dict, list, tuple, set, frozenset, *PRIMITIVES):
                return None
            if method is None or type(method) is not types.MethodDescriptorType:
                return None
            reducer: Any = functools.partial(method, value)
        elif (_type_attr(kind, "__module__") or "").split(".")[0] in STATEFUL_MODULES \
                and not issubclass(kind, (dict, list, tuple, set, frozenset, *PRIMITIVES)):
            reducer = functools.partial(value.__reduce_ex__, 4)
        else:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                reduced = reducer()
            except Exception:
                return ("repr", object.__repr__(value) if self._owned(kind) else repr(value)[:2000])
        if isinstance(reduced, tuple):
            # Item 0 is the constructor; items 3 and 4 are iterators over list and dict items.
            parts = list(reduced[1:3])
            parts += [list(p) if isinstance(p, types.GeneratorType) or hasattr(p, "__next__")
                      else p for p in reduced[3:5]]
            return ("reduced", self.print(tuple(parts)))
        return ("reduced", repr(reduced)[:200])

    def _library_module(self, module: types.ModuleType) -> bool:
        """A module imported from the installs (not one the candidate made or loaded)."""
        name = vars(module).get("__name__")
        if type(name) is not str or sys.modules.get(name) is not module:
            return False
        if name in sys.builtin_module_names:
            return True
        return vars(module) is not self.namespace and not _outside_libraries(module)

    def _owned(self, cls: type) -> bool:
        """A class the candidate defined (whatever its `__module__` claims)."""
        known = self.own_types.get(id(cls))
        if known is None and not _type_attr(cls, "__flags__") & _HEAP_TYPE:
            known = False  # a type of C code (list_iterator, itertools.count): none of its own
        if known is None:
            known = not self._foreign_library(cls) or any(
                self._defines_functions(c) for c in _type_attr(cls, "__mro__") if c is not object)
            self.own_types[id(cls)] = known
        return known

    def _defines_functions(self, cls: type) -> bool:
        for member in dict(_type_attr(cls, "__dict__")).values():
            inner = member.__func__ if type(member) in (staticmethod, classmethod) else \
                member.fget if type(member) is property else None
            for fn in (member, inner):
                if type(fn) is types.FunctionType and fn.__globals__ is self.namespace:
                    return True
        return False

    def _foreign_library(self, cls: type) -> bool:
        """`cls` is found where it says it lives, in a module other than the candidate's."""
        name = _type_attr(cls, "__module__")
        if type(name) is not str or name == self.own:
            return False
        found: Any = sys.modules.get(name)
        if type(found) is not types.ModuleType or vars(found) is self.namespace \
                or not self._library_module(found):
            return False
        for part in str(_type_attr(cls, "__qualname__")).split("."):
            members = vars(found) if type(found) is types.ModuleType else \
                _type_attr(found, "__dict__") if isinstance(found, type) else {}
            found = members.get(part)
        return found is cls


def _type_attr(cls: type, name: str) -> Any:
    """A class's own `__dict__`, `__mro__`, `__module__`... read through `type`'s descriptors
    (a metaclass of the candidate's cannot answer instead)."""
    return type.__dict__[name].__get__(cls, type)


def _instance_dict(value: Any) -> dict[Any, Any] | None:
    """An object's attribute dict, through its C descriptor only (a `__dict__` property of the
    candidate's does not run: the garbage collector's view, what it refers to, is used instead)."""
    for cls in _type_attr(type(value), "__mro__"):
        descriptor = _type_attr(cls, "__dict__").get("__dict__")
        if descriptor is None:
            continue
        if type(descriptor) is types.GetSetDescriptorType:
            found = descriptor.__get__(value)
            return found if type(found) is dict else None
        break
    else:
        return None  # no attribute dict
    referents = gc.get_referents(value)  # an inline dict shows its values only
    return {f"referent {i}": r for i, r in enumerate(referents)} if referents else None


@functools.cache
def _library_names(kind: type) -> frozenset[str]:
    """Every name the code of a library class's functions uses (its own attributes among them,
    wherever it sets them)."""
    found: set[str] = {"__dict__", "__weakref__", "__wrapped__", "__doc__", "__module__",
                       "__name__", "__qualname__", "__annotations__", "__signature__"}

    def add(code: types.CodeType) -> None:
        found.update(code.co_names)
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                add(constant)

    for cls in kind.__mro__:
        for member in dict(vars(cls)).values():
            for fn in (member, getattr(member, "__func__", None), getattr(member, "fget", None),
                       getattr(member, "fset", None)):
                if isinstance(fn, types.FunctionType):
                    add(fn.__code__)
    return frozenset(found)


def _fingerprint(module: types.ModuleType) -> Any:
    try:
        return _Walker(module).walk()
    except _TooLarge:
        return TOO_LARGE
    except RecursionError:  # nested deeper than the interpreter's stack
        return TOO_LARGE


def _grew(before: Any, now: Any) -> bool:
    """`now` is `before` with only entries added (the one change a cache keyed by a new call
    signature makes): a dict, a set or an object's attributes gained entries, an lru_cache
    holds more, a None was set; everything else as it was."""
    if before == now:
        return True
    if not (isinstance(before, tuple) and isinstance(now, tuple)) or not before or not now:
        return False
    if before == ("v", "NoneType", None):
        return True  # a lazy initialisation
    tag = before[0]
    if tag != now[0] or len(before) != len(now) or before[1:2] != now[1:2] and tag != "tuple":
        return False
    if tag == "dict":
        old, new = dict(before[2]), dict(now[2])
        return all(k in new and _grew(v, new[k]) for k, v in old.items()) \
            and all(_grew(b, n) for b, n in zip(before[3:], now[3:]))
    if tag == "set":
        return before[2] <= now[2]
    if tag == "lru":
        return _lru_kept(before, now, True)
    if tag == "tuple":
        return len(before[1]) == len(now[1]) and all(map(_grew, before[1], now[1]))
    if tag in ("object", "class", "function", "partial", "method", "wrapper", "property",
               "builtin", "library", "module"):
        return all(map(_grew, before[2:], now[2:]))
    return False  # a value, a list, an iterator, a generator, a tensor's version: changed


def _lru_kept(before: Any, now: Any, growth: bool) -> bool:
    """An lru_cache as an honest one changes: entries added (at a new signature), or swapped
    when a bounded one is full (its own eviction, whatever the call), its kept ones unchanged."""
    old, new = dict(before[4][2]), dict(now[4][2])
    same = _grew if growth else (lambda b, n: b == n)
    return (growth or now[2] <= before[2]) and same(before[3], now[3]) \
        and all(same(v, new[k]) for k, v in old.items() if k in new)


def _first_change(before: Any, now: Any, path: str, growth: bool) -> str | None:
    """Where `now` differs from `before` (beyond growth, when growth is allowed)."""
    if before == now or (growth and _grew(before, now)):
        return None
    if isinstance(before, tuple) and isinstance(now, tuple) and before[:2] == now[:2] \
            and before[0] == "lru" and _lru_kept(before, now, growth):
        return None
    if not (isinstance(before, tuple) and isinstance(now, tuple)) or not before or not now \
            or before[0] != now[0] or len(before) != len(now):
        return path
    tag = before[0]
    if tag == "dict":
        old, new = dict(before[2]), dict(now[2])
        for key, value in old.items():
            where = f"{path}[{_label(key)}]" if path else _label(key)
            if key not in new:
                return f"{where} (removed)"
            found = _first_change(value, new[key], where, growth)
            if found is not None:
                return found
        if new.keys() - old.keys() or before[3:] != now[3:]:
            return path or "a new global"
        return None
    if tag == "function":
        parts = [("defaults", before[3], now[3]), ("keyword defaults", before[4], now[4])]
        old_cells, new_cells = dict(before[5][2]), dict(now[5][2])
        parts += [(f"closure {_label(name)!r}", cell, new_cells.get(name))
                  for name, cell in old_cells.items()]
        parts.append(("attributes", before[6], now[6]))
        for label, b, n in parts:
            if _first_change(b, n, "", growth) is not None:
                return f"{path} {label}"
        return None if before[1:3] == now[1:3] else f"{path} (code)"
    if tag in ("list", "tuple"):
        if len(before[-1]) != len(now[-1]) or before[:-1] != now[:-1]:
            return path
        for i, (b, n) in enumerate(zip(before[-1], now[-1])):
            found = _first_change(b, n, f"{path}[{i}]", growth)
            if found is not None:
                return found
        return None
    if tag in ("object", "class", "partial", "method", "wrapper", "property", "builtin", "lru",
               "library", "module", "tensor", "contextvar"):
        for b, n in zip(before[2:], now[2:]):
            found = _first_change(b, n, path, growth)
            if found is not None:
                return found
        return None if before[1] == now[1] else path
    return path


def _label(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 3 and key[0] == "v" and key[1] == "str":
        return str(key[2])
    return repr(_plain(key))[:80]


def _plain(key: Any) -> Any:
    """A key's value back from its print, where it is made of plain values."""
    if isinstance(key, tuple) and len(key) == 3 and key[0] == "v":
        return key[2]
    if isinstance(key, tuple) and len(key) == 2 and key[0] == "tuple":
        return tuple(_plain(k) for k in key[1])
    return _OPAQUE


class _Opaque:
    def __repr__(self) -> str:
        return "..."


_OPAQUE = _Opaque()


@dataclass
class CallableState:
    """The candidate module's state, fingerprinted after the import and after each check."""

    module: types.ModuleType
    print: Any = None
    signatures: set[tuple[Any, ...]] = field(default_factory=set)
    pending: list[Any] = field(default_factory=list)  # timed calls' arguments, not yet checked

    @classmethod
    def take(cls, module: types.ModuleType) -> CallableState:
        state = cls(module)
        state.print = _fingerprint(module)
        return state

    def note(self, calls: Iterable[Iterable[Any]]) -> None:
        """Calls made since the last check (a timed batch), for the next check to count."""
        self.pending.extend(calls)

    def changes(self, calls: Iterable[Iterable[Any]] | None = None) -> list[str]:
        """What changed since the last check, beyond what the calls made since then (their
        arguments, in `calls`) may change: growth when one of them had a new signature, nothing
        otherwise (and nothing when `calls` is None)."""
        if self.print == TOO_LARGE:
            return [f"kernel.py's module state is too large to check (more than {MAX_NODES} "
                    "objects reachable from its globals, or nested too deep) [call-time-state]"]
        calls, self.pending = [*self.pending, *(calls or ())], []
        signatures = {call_signature(args) for args in calls}
        growth = bool(signatures - self.signatures)
        self.signatures |= signatures
        now = _fingerprint(self.module)
        if now == TOO_LARGE:
            self.print = now
            return self.changes()
        try:
            where = _first_change(self.print, now, "", growth)
        except RecursionError:
            where = "the module state (nested too deep to compare)"
        self.print = now
        if where is None:
            return []
        what = "a call with a signature already seen" if not growth else "a call"
        return [f"{where or 'the module globals'} changed at {what} (a counter or a cache in "
                f"module state, a default argument or a closure) [call-time-state]"]
