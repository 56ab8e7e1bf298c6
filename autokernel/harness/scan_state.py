"""The static scan's rules for call-time state that no store on a module name shows.

The scan's main pass (`static_scan`) flags a store, a `global`, a mutating method called on a
module-level name. These write the same state without one (red team 4):

- `next` handed over as a value (`functools.partial(next, itertools.count())`, `map(next, ...)`):
  whoever calls it advances an iterator kept across calls;
- the operator module's writing functions (`operator.setitem(_SEEN, key, n)`, `operator.iadd`),
  and a builtin type's mutating method called unbound (`dict.update(_S, ...)`,
  `list.append(_CALLS, 1)`);
- a module-level name handed to a function of the file that mutates that parameter
  (`_bump(_CALLS)` with `def _bump(box): box.append(1)`), followed through helpers that pass
  their parameter on;
- a default argument with a mutable container nested in it (`_calls=((([0],),),)`).

The run-time fingerprint (`guards.state`) is the defence; these fail fast with a line number.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from autokernel.harness.scan_ast import dotted, function_locals, root_name
from autokernel.harness.scan_rules import MUTATING_METHODS, Violation

OPERATOR_WRITES = frozenset({
    "setitem", "delitem", "iadd", "iand", "iconcat", "ifloordiv", "ilshift", "imod", "imul",
    "imatmul", "ior", "ipow", "irshift", "isub", "itruediv", "ixor",
    "__setitem__", "__delitem__", "__iadd__", "__iconcat__", "__ior__", "__iand__", "__isub__",
    "__imul__"})
BUILTIN_CONTAINERS = frozenset({"dict", "list", "set", "bytearray", "deque", "collections.deque",
                                "OrderedDict", "collections.OrderedDict", "Counter",
                                "collections.Counter", "defaultdict", "collections.defaultdict"})
MUTABLE_NODES = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _mutates(method: str) -> bool:
    return method in MUTATING_METHODS or (method.endswith("_") and not method.startswith("_"))


def state_violations(tree: ast.Module, module_names: set[str], imported: set[str],
                     resolve: Callable[[ast.expr], str | None]) -> list[Violation]:
    """The forms above, in `tree` (module-level bindings and imports as the scan collected)."""
    found: list[Violation] = []
    calls_of_next = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "next" and "next" not in module_names \
                and isinstance(node.ctx, ast.Load) and id(node) not in calls_of_next:
            found.append(Violation("call-time-state", node.lineno, "next handed over as a value "
                                   "(whoever calls it advances an iterator kept across calls)"))
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            path = resolve(node)
            if path is not None and path.split(".")[0] == "operator" \
                    and path.rsplit(".", 1)[-1] in OPERATOR_WRITES:
                found.append(Violation("call-time-state", node.lineno, f"{path} writes the "
                                       "container it is handed (state kept across calls)"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and dotted(node.func.value) in BUILTIN_CONTAINERS and _mutates(node.func.attr) \
                and node.args:
            found.append(Violation("call-time-state", node.lineno, f"{dotted(node.func)}() "
                                   "writes the container it is handed (state kept across "
                                   "calls)"))
        if isinstance(node, (*FUNCTIONS, ast.Lambda)):
            found += _nested_mutable_defaults(node)
    found += _module_state_passed_to_mutators(tree, module_names, imported)
    return found


def _nested_mutable_defaults(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                             ) -> list[Violation]:
    defaults = list(node.args.defaults) + [d for d in node.args.kw_defaults if d is not None]
    return [Violation("call-time-state", default.lineno, "mutable default argument: a "
                      "container nested in a tuple (state kept across calls)")
            for default in defaults if isinstance(default, ast.Tuple)
            and any(isinstance(n, MUTABLE_NODES) for n in ast.walk(default))]


def _mutated_parameters(func: ast.FunctionDef | ast.AsyncFunctionDef,
                        known: dict[str, set[int]]) -> set[int]:
    """Positions of the parameters `func` writes: a mutating method on one, a store into one,
    or one handed on to a function known to write that position."""
    params = [a.arg for a in func.args.posonlyargs + func.args.args]
    written: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and _mutates(node.func.attr):
            written.add(root_name(node.func.value) or "")
        elif isinstance(node, (ast.Subscript, ast.Attribute)) \
                and isinstance(node.ctx, (ast.Store, ast.Del)):
            written.add(root_name(node.value) or "")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in known:
            written |= {root_name(node.args[i]) or "" for i in known[node.func.id]
                        if i < len(node.args)}
    return {i for i, name in enumerate(params) if name in written}


def _module_state_passed_to_mutators(tree: ast.Module, module_names: set[str],
                                     imported: set[str]) -> list[Violation]:
    functions = [n for n in tree.body if isinstance(n, FUNCTIONS)]
    known: dict[str, set[int]] = {}
    for _ in range(len(functions) + 1):  # a fixpoint: helpers that hand their parameter on
        changed = False
        for func in functions:
            positions = _mutated_parameters(func, known)
            if positions and positions != known.get(func.name):
                known[func.name], changed = positions, True
        if not changed:
            break
    found = []
    for func in (n for n in ast.walk(tree) if isinstance(n, FUNCTIONS)):
        own = function_locals(func)
        for node in ast.walk(func):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in known):
                continue
            for i in known[node.func.id]:
                root = root_name(node.args[i]) if i < len(node.args) else None
                if root in module_names and root not in imported and root not in own:
                    found.append(Violation(
                        "call-time-state", node.lineno, f"{node.func.id}() writes its "
                        f"parameter #{i + 1}, handed module-level {root!r} at call time "
                        "(state kept across calls)"))
    return found
