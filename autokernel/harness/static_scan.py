"""The harness's first gate: an AST scan of a candidate `kernel.py`, run without importing it.

A kernel file may compute with torch (allocation and layout only, see `guards.ALLOWED_ATEN_OPS`)
and Triton, and nothing else. The scan rejects what an honest kernel never needs and a cheating one
does: reaching the process, the file system, the network or the environment; replacing functions
of other modules (the reference, the timer); side streams and threads; tensor subclasses (lazy
outputs); state written at call time (result caches keyed on pointers, shapes or values); reading
tensor values on the host (numpy or Python compute behind a token launch); registering operators
or Triton launch hooks (torch compute under an allowed name, or inside a launch); frames,
tracebacks and names the file never binds (the harness's own state, reached through the stack).

Python cannot be sandboxed by an AST scan alone: a determined candidate can hide an attribute store
behind a function parameter. Everything here is therefore also checked dynamically in the worker
(`autokernel.harness.guards`); the scan exists to fail fast with a precise rule and line number.
Each `Violation` names its rule; the rule names are part of the harness's output contract.

Names are matched wherever they appear, whatever they are reached through: `x.numpy()`,
`getattr(x, "numpy")`, `from numpy import ctypeslib`, `import numpy.lib.format as f` and
`L = numpy.lib; L.format` are all the same use. Modules are followed through import aliases and
plain module-level assignments.

Why a module-level config cache is refused although it holds no tensors: "call-time-state" cannot
tell a dict of launch configurations keyed by shape from a dict of call counts keyed by shape that
switches to a cheat after the checked calls (tests/adversarial/drift_after_checks.py): both are
`CACHE[key] = ints`. The accepted form of a config cache is `functools.cache`/`lru_cache` on a
helper of plain values (shapes, dtypes): it cannot count calls, and one that is handed tensors
replays stale results that the harness's refill probe catches. Module-level state that does hold
tensors after a call is also refused dynamically (`guards.retained_tensors`), however it was
written.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

from autokernel.backends import BACKEND_NAMES, backend
from autokernel.backends.interface import declared_backend
from autokernel.harness.scan_ast import (
    dotted, format_fields, function_locals, pure_chain, root_name, scope_bindings,
)
from autokernel.harness.scan_state import state_violations
from autokernel.harness.scan_rules import (  # noqa: F401 (RULES, Violation, coding_problem
    ALLOWED_DUNDER_ATTRIBUTES, CACHING_DECORATORS, CONFIG_CACHE_ADVICE,  # are re-exported)
    CONSTRUCTORS, FORBIDDEN_BUILTINS, FORBIDDEN_MODULE_PATHS, FORBIDDEN_NAMES,
    FORBIDDEN_SUBMODULES, HOST_FILE_FUNCTIONS, HOST_MODULES, HOST_PROTOCOLS,
    INNER_OBJECT_METHODS, MODULE_DUNDERS, MUTATING_METHODS, RULES, TORCH_PROTOCOLS, Violation,
    attribute_rule, check_module, coding_problem, foreign_module, module_path_rule,
)
from autokernel.pysource import parse_source


@dataclass
class _Scope:
    """One function being scanned: its own names, and its locals that alias module state."""

    name: str
    locals: set[str]
    aliases: dict[str, str]  # local name -> the module-level (or enclosing) name it aliases
    method_of_class: bool
    first_parameter: str | None = None  # a method's self or cls


# Calls whose result is an immutable value: fine as a default argument.
IMMUTABLE_CONSTRUCTORS = frozenset({"float", "int", "str", "bytes", "bool", "complex", "tuple",
                                    "frozenset", "constexpr", "dtype", "device", "Size",
                                    "next_power_of_2", "cdiv"})

class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.imported: set[str] = set()  # names bound by imports (modules and their members)
        self.import_roots: dict[str, str] = {}  # bound name -> root module it came from
        self.module_paths: dict[str, str] = {}  # bound name -> dotted module path it stands for
        self.module_names: set[str] = set()  # every module-level binding
        self.defaultdicts: set[str] = set()  # module-level names bound to a defaultdict
        self.strings: dict[str, str] = {}  # module-level names bound to a string constant
        self.definitions: set[str] = set()  # module-level functions and classes
        self.import_time_calls: set[str] = set()  # names called while the module is imported
        self.cached_functions: set[str] = set()  # module-level functions under functools.cache
        # Name resolution: ("function" | "class" | "comprehension", names bound there).
        self.name_scopes: list[tuple[str, set[str]]] = []
        self.scopes: list[_Scope] = []
        self.class_depth = 0
        # Beyond the allow-list (cuda files): module -> the names it may be imported for.
        self.allowed_modules: dict[str, frozenset[str]] = {}

    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        self.violations.append(Violation(rule, getattr(node, "lineno", 0), message))

    @property
    def function_stack(self) -> list[set[str]]:
        return [scope.locals for scope in self.scopes]

    # -- module-level bookkeeping ---------------------------------------------------------------

    def collect_module_names(self, tree: ast.Module) -> None:
        for node in tree.body:
            roots = node.decorator_list if isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else [node]
            self.import_time_calls |= {dotted(call.func).split(".")[0] for root in roots
                                       for call in ast.walk(root) if isinstance(call, ast.Call)}
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                source = node.module if isinstance(node, ast.ImportFrom) else None
                for alias in node.names:
                    bound = (alias.asname or alias.name).split(".")[0]
                    self.imported.add(bound)
                    self.module_names.add(bound)
                    self.import_roots[bound] = (source or alias.name).split(".")[0]
                    if source is not None:
                        self.module_paths[bound] = f"{source}.{alias.name}"
                    else:
                        self.module_paths[bound] = alias.name if alias.asname else bound
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.module_names.add(node.name)
                self.definitions.add(node.name)
                decorators = [d.func if isinstance(d, ast.Call) else d
                              for d in node.decorator_list]
                if any(dotted(d).rsplit(".", 1)[-1] in CACHING_DECORATORS for d in decorators):
                    self.cached_functions.add(node.name)
            else:
                self.module_names |= scope_bindings([node])
                if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                        and isinstance(node.targets[0], ast.Name):
                    self._note_module_assignment(node.targets[0].id, node.value)

    def _note_module_assignment(self, name: str, value: ast.expr) -> None:
        """`L = np.lib` makes `L` stand for numpy.lib; `D = defaultdict(list)` is a defaultdict."""
        resolved = self._resolve(value)
        if resolved is not None:
            self.module_paths[name] = resolved
            self.import_roots[name] = resolved.split(".")[0]
        if isinstance(value, ast.Call) \
                and dotted(value.func).rsplit(".", 1)[-1] == "defaultdict":
            self.defaultdicts.add(name)
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            self.strings[name] = value.value

    def _resolve(self, node: ast.expr) -> str | None:
        """The dotted module path an attribute chain stands for, through import aliases."""
        chain = pure_chain(node)
        if chain is None or chain[0] not in self.module_paths:
            return None
        return ".".join([self.module_paths[chain[0]], *chain[1]])

    def _module_level(self, name: str | None) -> bool:
        """True when `name`, seen inside a function, refers to a module-level binding."""
        if name is None or name not in self.module_names:
            return False
        return not any(name in scope for scope in self.function_stack)

    def _enclosing_local(self, name: str | None) -> bool:
        """True when `name`, seen inside a nested function, is a local of an enclosing function
        that runs while the module is imported (a factory): the inner function then keeps that
        variable across calls. A helper nested in kernel_fn is made afresh on every call."""
        if name is None or len(self.scopes) < 2 or name in self.scopes[-1].locals:
            return False
        return self.scopes[0].name in self.import_time_calls \
            and any(name in scope.locals for scope in self.scopes[:-1])

    # -- imports --------------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if (violation := check_module(alias.name, node.lineno)) is not None:
                self.violations.append(violation)
            if self.scopes:
                self.imported.add((alias.asname or alias.name).split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag("import-not-allowed", node, "relative import (a kernel file stands alone)")
            return
        module = node.module or ""
        if module in self.allowed_modules:
            allowed = self.allowed_modules[module]
            for alias in node.names:
                if alias.name not in allowed:
                    self.flag("import-not-allowed", node,
                              f"'from {module} import {alias.name}': only "
                              f"{', '.join(sorted(allowed))} may be imported from it")
            return
        if (violation := check_module(module, node.lineno)) is not None:
            self.violations.append(violation)
            return
        for alias in node.names:
            member_rule = attribute_rule(alias.name)
            path_rule = module_path_rule(f"{module}.{alias.name}")
            if alias.name == "*":
                self.flag("import-not-allowed", node, f"'from {module} import *'")
            elif alias.name.startswith("_"):
                self.flag("private-attribute", node, f"import of private name {alias.name!r}")
            elif alias.name in FORBIDDEN_SUBMODULES:
                self.flag("import-not-allowed", node, f"import of {module}.{alias.name}")
            elif member_rule is not None:
                self.flag(member_rule, node, f"import of {module}.{alias.name}")
            elif path_rule is not None:
                self.flag(path_rule, node, f"import of {module}.{alias.name}")
            elif (foreign := foreign_module(f"{module}.{alias.name}")) is not None:
                self.flag("module-escape", node, f"import of {module}.{alias.name}, which is "
                          f"{foreign}")
            if self.scopes:
                self.imported.add(alias.asname or alias.name)

    # -- names, calls, attributes ----------------------------------------------------------------

    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        loading = isinstance(node.ctx, ast.Load)
        if name in FORBIDDEN_NAMES:
            self.flag("private-attribute", node, f"use of {name}")
        elif name in FORBIDDEN_BUILTINS and loading:
            if not any(name in scope for scope in self.function_stack) \
                    and name not in self.module_names:
                self.flag("forbidden-builtin", node, f"use of builtin {name}()")
        elif name == "getattr" and loading:
            # A direct call is checked in visit_Call; passing getattr around hides the name.
            self.flag("dynamic-attribute", node, "getattr used as a value")
        elif loading and not self._resolves(name):
            # Bound nowhere in the file: put into its namespace from outside (the Triton
            # interpreter copies its own globals, `inspect` among them, into a kernel's module).
            self.flag("undefined-name", node, f"{name!r} is never bound in this file")
        if isinstance(node.ctx, ast.Store):
            self._check_protocol_name(name, node)
        if loading and self.scopes and name in self.defaultdicts and self._module_level(name):
            self.flag("call-time-state", node, f"module-level defaultdict {name!r} used at call "
                      "time (reading it creates entries)" + CONFIG_CACHE_ADVICE)

    def _resolves(self, name: str) -> bool:
        """Python's lookup for a name loaded here: this scope, enclosing functions (a class
        body is seen only from itself), the module, builtins."""
        for depth, (kind, names) in enumerate(reversed(self.name_scopes)):
            if name in names and (kind != "class" or depth == 0):
                return True
        return name in self.module_names or name in MODULE_DUNDERS or hasattr(builtins, name)

    def _check_protocol_name(self, name: str, node: ast.AST) -> None:
        if name in HOST_PROTOCOLS:
            self.flag("host-readout", node, f"defines {name} (numpy/dlpack view of memory)")
        elif name in TORCH_PROTOCOLS:
            self.flag("tensor-subclass", node, f"defines {name}")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._check_protocol_name(node.value, node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "getattr":
            self._check_getattr(node)
            return
        if isinstance(func, ast.Name) and func.id == "next" and self.scopes and node.args:
            root = root_name(node.args[0])
            if self._module_level(root) and root not in self.imported:
                self.flag("call-time-state", node, f"next({root}) advances module-level "
                          f"{root!r} at call time (state kept across calls)")
        if isinstance(func, ast.Attribute) and func.attr in {"format", "format_map"}:
            self._check_format(node, func)
        if isinstance(func, ast.Attribute) and self.scopes and self._mutates(func.attr):
            self._check_mutation(node, func)
        self.generic_visit(node)

    @staticmethod
    def _mutates(method: str) -> bool:
        in_place = method.endswith("_") and not method.startswith("_")
        return method in MUTATING_METHODS or in_place

    def _check_getattr(self, node: ast.Call) -> None:
        name = node.args[1] if len(node.args) >= 2 else None
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            self.flag("dynamic-attribute", node, "getattr with a computed attribute name")
        elif name.value.startswith("_"):
            self.flag("private-attribute", node, f"getattr of private {name.value!r}")
        elif (rule := attribute_rule(name.value)) is not None:
            self.flag(rule, node, f"getattr(..., {name.value!r})")
        elif node.args and (resolved := self._resolve(node.args[0])) is not None \
                and (foreign := foreign_module(f"{resolved}.{name.value}")) is not None:
            self.flag("module-escape", node, f"getattr of {resolved}.{name.value}, which is "
                      f"{foreign}")
        elif node.args and (resolved := self._resolve(node.args[0])) is not None \
                and (rule := module_path_rule(f"{resolved}.{name.value}")) is not None:
            self.flag(rule, node, f"getattr of {resolved}.{name.value}")
        for arg in node.args:
            if not isinstance(arg, ast.Constant):
                self.visit(arg)
        for keyword in node.keywords:
            self.visit(keyword)

    def _check_format(self, node: ast.Call, func: ast.Attribute) -> None:
        template = func.value
        if isinstance(template, ast.Name) and template.id in self.strings \
                and self._module_level(template.id):
            text: str | None = self.strings[template.id]
        elif isinstance(template, ast.Constant) and isinstance(template.value, str):
            text = template.value
        else:
            text = None
        if text is None:
            self.flag("dynamic-attribute", node, f"{dotted(func)}() with a computed template "
                      "(its fields can read attributes by name)")
        elif fields := format_fields(text):
            self.flag("dynamic-attribute", node, f"format field {fields[0]!r} reads an "
                      "attribute or item by name")

    def _alias_message(self, verb: str, alias: str) -> str:
        origin = self.scopes[-1].aliases[alias]
        if origin.startswith("the cached result"):
            return (f"{verb} {origin} through the alias {alias!r} at call time (a cached "
                    "helper's result is state kept across calls)")
        return (f"{verb} module-level {origin!r} through the alias {alias!r} at call time"
                + CONFIG_CACHE_ADVICE)

    def _check_mutation(self, node: ast.Call, func: ast.Attribute) -> None:
        root = root_name(func.value)
        scope = self.scopes[-1]
        if root in self.imported and self._module_level(root):
            self.flag("monkeypatch", node, f"{dotted(func)}() mutates an imported module's state")
        elif self._module_level(root):
            self.flag("call-time-state", node, f"{dotted(func)}() writes module-level {root!r} "
                      "at call time (a result cache)" + CONFIG_CACHE_ADVICE)
        elif root in scope.aliases:
            self.flag("call-time-state", node, self._alias_message(f"{dotted(func)}() writes",
                                                                   root))
        elif self._enclosing_local(root):
            self.flag("call-time-state", node, f"{dotted(func)}() writes {root!r}, a variable "
                      "of the enclosing function (closure state kept across calls)")
        elif root == "self" and scope.method_of_class and scope.name not in CONSTRUCTORS:
            self.flag("call-time-state", node, f"{dotted(func)}() writes instance state in "
                      f"{scope.name}() (state kept across calls)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        rule = attribute_rule(attr)
        resolved = self._resolve(node)
        path_rule = module_path_rule(resolved) if resolved is not None else None
        if rule is not None:
            self.flag(rule, node, f"use of {dotted(node)}")
        elif path_rule is not None and resolved in FORBIDDEN_MODULE_PATHS:
            self.flag(path_rule, node, f"use of {resolved}")
        elif resolved is not None and (foreign := foreign_module(resolved)) is not None:
            self.flag("module-escape", node, f"use of {dotted(node)}, which is {foreign}")
        elif attr in HOST_FILE_FUNCTIONS \
                and self.import_roots.get(root_name(node) or "") in HOST_MODULES:
            self.flag("file-access", node, f"use of {dotted(node)}")
        elif attr.startswith("__") and attr.endswith("__"):
            if attr not in ALLOWED_DUNDER_ATTRIBUTES:
                self.flag("private-attribute", node, f"use of {dotted(node)}")
        elif attr.startswith("_"):
            base = node.value
            scope = self.scopes[-1] if self.scopes else None
            # Only a method's own first parameter: `self` anywhere else is any object.
            own = isinstance(base, ast.Name) and base.id in ("self", "cls") \
                and scope is not None and scope.method_of_class \
                and scope.first_parameter == base.id
            if not own:
                self.flag("private-attribute", node, f"use of private {dotted(node)}")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._check_store(node)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._check_store(node)
        self.generic_visit(node)

    def _check_store(self, node: ast.Attribute | ast.Subscript) -> None:
        root = root_name(node.value)
        verb = "assigns to" if isinstance(node.ctx, ast.Store) else "deletes"
        in_function = bool(self.scopes)
        target = dotted(node) if isinstance(node, ast.Attribute) else f"{root}[...]"
        if root in self.imported and (not in_function or self._module_level(root)):
            self.flag("monkeypatch", node, f"{verb} {target}, part of an imported module")
        elif not in_function:
            return
        elif self._module_level(root):
            self.flag("call-time-state", node, f"{verb} module-level {root!r} at call time "
                      "(a result cache)" + CONFIG_CACHE_ADVICE)
        elif root in self.scopes[-1].aliases:
            self.flag("call-time-state", node, self._alias_message(verb, root))
        elif self._enclosing_local(root):
            self.flag("call-time-state", node, f"{verb} {target}, a variable of the enclosing "
                      "function (closure state kept across calls)")
        elif root == "self" and self.scopes[-1].method_of_class \
                and self.scopes[-1].name not in CONSTRUCTORS:
            self.flag("call-time-state", node, f"{verb} {target} in {self.scopes[-1].name}() "
                      "(instance state kept across calls)")

    def visit_Assign(self, node: ast.Assign) -> None:
        self._note_alias(node.targets, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._note_alias([node.target], node.value)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self._note_alias([node.target], node.value)
        self.generic_visit(node)

    def _note_alias(self, targets: list[ast.expr], value: ast.expr) -> None:
        """Inside a function, `pool = _POOLS[key]` makes `pool` an alias of module state."""
        if not self.scopes:
            return
        source = value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                and value.func.id in self.cached_functions and self._module_level(value.func.id):
            # A cached helper returns the same object for the same arguments: its result is
            # state kept across calls, out of reach of any check but this one.
            for target in targets:
                if isinstance(target, ast.Name):
                    self.scopes[-1].aliases[target.id] = f"the cached result of {value.func.id}()"
            return
        if isinstance(value, ast.Call):
            if not (isinstance(value.func, ast.Attribute)
                    and value.func.attr in INNER_OBJECT_METHODS):
                return
            source = value.func.value
        if not isinstance(source, (ast.Name, ast.Subscript, ast.Attribute)):
            return
        root = root_name(source)
        held = self._module_level(root) and root not in self.imported \
            and root not in self.definitions
        if not (held or self._enclosing_local(root) or root in self.scopes[-1].aliases):
            return
        origin = self.scopes[-1].aliases.get(root or "", root or "")
        for target in targets:
            if isinstance(target, ast.Name):
                self.scopes[-1].aliases[target.id] = origin

    # -- scopes and definitions -------------------------------------------------------------------

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        defaults = list(node.args.defaults) + [d for d in node.args.kw_defaults if d is not None]
        for default in defaults:
            mutable = isinstance(default, (ast.List, ast.Dict, ast.Set, ast.ListComp,
                                           ast.DictComp, ast.SetComp))
            if isinstance(default, ast.Call):
                # Made by a call: an iterator (itertools.count()) or container counts calls;
                # only constructors of immutable values are plain defaults.
                callee = dotted(default.func).rsplit(".", 1)[-1]
                mutable = callee not in IMMUTABLE_CONSTRUCTORS
            if mutable:
                made = f"made by {dotted(default.func)}() " \
                    if isinstance(default, ast.Call) else ""
                self.flag("call-time-state", default, f"mutable default argument {made}(state "
                          "kept across calls: a counter or result cache)")
        name = getattr(node, "name", "<lambda>")
        if not isinstance(node, ast.Lambda):
            self._check_protocol_name(node.name, node)
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if dotted(target).rsplit(".", 1)[-1] in CACHING_DECORATORS \
                        and node.name == "kernel_fn":
                    self.flag("call-time-state", decorator, "kernel_fn's results are cached")
                self.visit(decorator)
        for default in defaults:
            self.visit(default)
        method = self.class_depth > 0 and not self.scopes
        own = function_locals(node)
        positional = node.args.posonlyargs + node.args.args
        first = positional[0].arg if positional else None
        decorated = {dotted(d) for d in getattr(node, "decorator_list", [])}
        if method and "staticmethod" in decorated:
            method = False
        self.scopes.append(_Scope(name, own, {}, method, first))
        self.name_scopes.append(("function", own))
        saved_depth, self.class_depth = self.class_depth, 0
        body = node.body if isinstance(node.body, list) else [node.body]
        for stmt in body:
            self.visit(stmt)
        self.class_depth = saved_depth
        self.name_scopes.pop()
        self.scopes.pop()

    def _visit_comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp
                             | ast.DictComp) -> None:
        targets = {n.id for generator in node.generators for n in ast.walk(generator.target)
                   if isinstance(n, ast.Name)}
        self.name_scopes.append(("comprehension", targets))
        self.generic_visit(node)
        self.name_scopes.pop()

    visit_ListComp = _visit_comprehension
    visit_SetComp = _visit_comprehension
    visit_GeneratorExp = _visit_comprehension
    visit_DictComp = _visit_comprehension

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function
    visit_Lambda = _visit_function

    def visit_Global(self, node: ast.Global) -> None:
        self.flag("call-time-state", node, f"'global {', '.join(node.names)}': module-level "
                  "state written at call time")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.flag("call-time-state", node, f"'nonlocal {', '.join(node.names)}': state kept "
                  "across calls")

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        """`case object(__globals__=g)` reads attributes by name, unseen as attributes."""
        for name in node.kwd_attrs:
            rule = attribute_rule(name)
            if rule is not None:
                self.flag(rule, node, f"match pattern reads attribute {name!r}")
            elif name.startswith("_"):
                self.flag("private-attribute", node, f"match pattern reads attribute {name!r}")
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            if dotted(base).rsplit(".", 1)[-1] in ("Tensor", "Parameter", "TensorBase"):
                self.flag("tensor-subclass", node, f"class {node.name} subclasses "
                          f"{dotted(base)}")
        for keyword in node.keywords:
            if keyword.arg == "metaclass":
                self.flag("private-attribute", node, f"class {node.name} sets a metaclass")
        self.class_depth += 1
        self.name_scopes.append(("class", scope_bindings(node.body)))
        self.generic_visit(node)
        self.name_scopes.pop()
        self.class_depth -= 1


def scan_source(source: str, sidecar_text: str | None = None) -> list[Violation]:
    """Every rule the source breaks, in line order (empty: the scan passes).

    A kernel file may also import its backend's runtime (`runtime_modules`), and the backend
    scans the file's other parts with its own rules (a
    `BACKEND = "cuda"` file's C++: the inline CUDA_SOURCE, or `sidecar_text`, its CUDA_FILE's
    text, by `autokernel.cuda.scan`)."""
    problem = coding_problem(source)
    if problem is not None:
        return [Violation("encoding", 1, problem)]
    try:
        tree = parse_source(source)
    except SyntaxError as exc:
        return [Violation("syntax", exc.lineno or 0, f"syntax error: {exc.msg}")]
    scanner = _Scanner()
    declared = declared_backend(tree)
    if declared in BACKEND_NAMES:  # an unknown one is the kernel-format check's to refuse
        chosen = backend(declared)
        scanner.allowed_modules = chosen.runtime_modules
        scanner.violations.extend(chosen.scan_parts(tree, sidecar_text))
    scanner.collect_module_names(tree)
    scanner.visit(tree)
    scanner.violations += state_violations(tree, scanner.module_names, scanner.imported,
                                           scanner._resolve)
    unique = {(v.line, v.rule, v.message): v for v in scanner.violations}
    return sorted(unique.values(), key=lambda v: (v.line, v.rule))


def summarize(violations: list[Violation], limit: int = 3) -> str:
    """One line for a BenchResult reason: the first few violations, and how many more."""
    shown = "; ".join(str(v) for v in violations[:limit])
    more = len(violations) - limit
    return shown + (f"; and {more} more" if more > 0 else "")
