"""The harness's first gate: an AST scan of a candidate `kernel.py`, run without importing it.

A kernel file may compute with torch (allocation and layout only, see `guards.ALLOWED_ATEN_OPS`)
and Triton, and nothing else. The scan rejects what an honest kernel never needs and a cheating one
does: reaching the process, the file system, the network or the environment; replacing functions
of other modules (the reference, the timer); side streams and threads; tensor subclasses (lazy
outputs); state written at call time (result caches keyed on pointers, shapes or values).

Python cannot be sandboxed by an AST scan alone: a determined candidate can hide an attribute store
behind a function parameter. Everything here is therefore also checked dynamically in the worker
(`autokernel.harness.guards`); the scan exists to fail fast with a precise rule and line number.
Each `Violation` names its rule; the rule names are part of the harness's output contract.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

# Root modules a kernel file may import. Everything else is rejected: the list is an allow-list.
ALLOWED_IMPORT_ROOTS: frozenset[str] = frozenset({
    "__future__", "abc", "cmath", "collections", "dataclasses", "enum", "functools", "itertools",
    "math", "numbers", "numpy", "operator", "torch", "triton", "typing", "typing_extensions",
})

# Submodules of allowed roots that reach compilers, files, processes or the network.
FORBIDDEN_SUBMODULES: frozenset[str] = frozenset({
    "cpp_extension", "ctypeslib", "distributed", "distutils", "f2py", "hub", "multiprocessing",
})

# Why the commonly attempted modules are refused (the message names the reason).
REFUSED_MODULE_REASONS: dict[str, str] = {
    **dict.fromkeys(("os", "sys", "pathlib", "shutil", "io", "tempfile", "glob"),
                    "process and file-system access"),
    **dict.fromkeys(("subprocess", "multiprocessing", "signal", "resource"), "process control"),
    **dict.fromkeys(("socket", "urllib", "http", "requests", "ftplib", "ssl", "asyncio"),
                    "network access"),
    **dict.fromkeys(("ctypes", "cffi", "mmap"), "native code and raw memory"),
    **dict.fromkeys(("threading", "_thread", "concurrent"), "background threads"),
    **dict.fromkeys(("importlib", "builtins", "inspect", "gc", "types", "weakref", "code", "runpy"),
                    "interpreter introspection"),
    **dict.fromkeys(("pickle", "marshal", "shelve", "copyreg"), "serialized code execution"),
    "time": "the clock the harness times with",
}

# Builtins that execute code, reach the file system or the interpreter's namespaces.
FORBIDDEN_BUILTINS: frozenset[str] = frozenset({
    "__import__", "breakpoint", "compile", "delattr", "eval", "exec", "exit", "globals", "help",
    "id", "input", "locals", "open", "quit", "setattr", "vars",
})

# Names that are the interpreter's own plumbing.
FORBIDDEN_NAMES: frozenset[str] = frozenset({"__builtins__", "__loader__", "__spec__"})

# Attribute names that reach forbidden things through an allowed module (`torch.os.environ`,
# `np.save`), grouped by the rule they break.
FORBIDDEN_ATTRIBUTES: dict[str, str] = {
    **dict.fromkeys(("environ", "getenv", "putenv", "unsetenv"), "environment-access"),
    **dict.fromkeys(("os", "sys", "subprocess", "socket", "ctypes", "threading", "multiprocessing",
                     "importlib", "builtins", "inspect", "gc", "signal", "pickle", "marshal",
                     "shutil", "pathlib", "system", "popen"), "module-escape"),
    **dict.fromkeys(("from_file", "tofile", "fromfile", "memmap", "loadtxt", "savetxt",
                     "genfromtxt", "savez", "savez_compressed", "cpp_extension", "load_inline",
                     "load_library", "hub"), "file-access"),
    **dict.fromkeys(("Stream", "stream", "set_stream", "ExternalStream", "wait_stream",
                     "StreamContext"), "side-stream"),
    **dict.fromkeys(("Thread", "ThreadPoolExecutor", "ProcessPoolExecutor", "Process", "Pool"),
                    "thread"),
    **dict.fromkeys(("as_subclass", "_make_subclass", "__torch_function__", "__torch_dispatch__"),
                    "tensor-subclass"),
    **dict.fromkeys(("attrgetter", "methodcaller"), "dynamic-attribute"),
    "compile": "library-fallback",
}

# `torch.save`/`np.load` read and write files (and unpickle code); `tl.load` is a Triton load.
HOST_FILE_FUNCTIONS: frozenset[str] = frozenset({"save", "load"})
HOST_MODULES: frozenset[str] = frozenset({"torch", "numpy"})

# Dunder attributes harmless enough to allow (everything else private is refused).
ALLOWED_DUNDER_ATTRIBUTES: frozenset[str] = frozenset({
    "__name__", "__qualname__", "__doc__", "__init__", "__call__", "__len__",
})

# Methods that mutate a container in place: called on a module-level name inside a function,
# they are call-time state (a cache).
MUTATING_METHODS: frozenset[str] = frozenset({
    "append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem", "clear",
    "remove", "discard", "__setitem__",
})

CACHING_DECORATORS: frozenset[str] = frozenset({"cache", "lru_cache", "cached_property"})

RULES: dict[str, str] = {
    "syntax": "the file must parse",
    "import-not-allowed": "imports only from an allow-list (torch, triton, numpy, math, functools, "
                          "typing, dataclasses, itertools, operator, enum, collections, ...)",
    "forbidden-builtin": "no open/exec/eval/compile/__import__/globals/vars/setattr/delattr/id",
    "dynamic-attribute": "getattr only with a literal public name; no attrgetter/methodcaller",
    "environment-access": "no access to environment variables",
    "module-escape": "no reaching os/sys/subprocess/... through another module's attribute",
    "file-access": "no reading or writing files, no compiling native extensions",
    "private-attribute": "no private or dunder attributes (interpreter and torch internals)",
    "monkeypatch": "no assigning to or deleting attributes of imported modules or their members",
    "side-stream": "no CUDA streams: the work must run on the harness's stream",
    "thread": "no threads or processes",
    "tensor-subclass": "no tensor subclasses (lazy or deferred outputs)",
    "call-time-state": "no module-level state written while kernel_fn runs (result caching)",
    "library-fallback": "no torch.compile: the kernel must be the file's own Triton code",
}


@dataclass(frozen=True)
class Violation:
    rule: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message} [{self.rule}]"


def _root_name(node: ast.expr) -> str | None:
    """`a` for `a.b.c`, `a[0].b`, `a.b(...)`; None when the chain starts with anything else."""
    while True:
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Name):
            return node.id
        else:
            return None


def _dotted(node: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts)) or "<expression>"


def _check_module(name: str, line: int) -> Violation | None:
    parts = name.split(".")
    root = parts[0]
    if root not in ALLOWED_IMPORT_ROOTS:
        why = REFUSED_MODULE_REASONS.get(root, "not on the import allow-list")
        return Violation("import-not-allowed", line, f"import of {name!r} ({why})")
    for part in parts[1:]:
        if part.startswith("_") or part in FORBIDDEN_SUBMODULES:
            return Violation("import-not-allowed", line, f"import of {name!r} (private or "
                             "process/file/compiler submodule)")
    return None


def _function_locals(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names bound in a function's own scope: parameters and assignment targets."""
    args = func.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    body = func.body if isinstance(func.body, list) else [func.body]
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.imported: set[str] = set()  # names bound by imports (modules and their members)
        self.import_roots: dict[str, str] = {}  # bound name -> root module it came from
        self.module_names: set[str] = set()  # every module-level binding
        self.function_stack: list[set[str]] = []

    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        self.violations.append(Violation(rule, getattr(node, "lineno", 0), message))

    # -- module-level bookkeeping ---------------------------------------------------------------

    def collect_module_names(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                source = node.module if isinstance(node, ast.ImportFrom) else None
                for alias in node.names:
                    bound = (alias.asname or alias.name).split(".")[0]
                    self.imported.add(bound)
                    self.module_names.add(bound)
                    self.import_roots[bound] = (source or alias.name).split(".")[0]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.module_names.add(node.name)
            else:
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                        self.module_names.add(sub.id)

    def _module_level(self, name: str | None) -> bool:
        """True when `name`, seen inside a function, refers to a module-level binding."""
        if name is None or name not in self.module_names:
            return False
        return not any(name in scope for scope in self.function_stack)

    # -- imports --------------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if (violation := _check_module(alias.name, node.lineno)) is not None:
                self.violations.append(violation)
            if self.function_stack:
                self.imported.add((alias.asname or alias.name).split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag("import-not-allowed", node, "relative import (a kernel file stands alone)")
            return
        module = node.module or ""
        if (violation := _check_module(module, node.lineno)) is not None:
            self.violations.append(violation)
            return
        for alias in node.names:
            if alias.name == "*":
                self.flag("import-not-allowed", node, f"'from {module} import *'")
            elif alias.name.startswith("_"):
                self.flag("private-attribute", node, f"import of private name {alias.name!r}")
            elif alias.name in FORBIDDEN_SUBMODULES:
                self.flag("import-not-allowed", node, f"import of {module}.{alias.name}")
            elif alias.name in FORBIDDEN_ATTRIBUTES:
                rule = FORBIDDEN_ATTRIBUTES[alias.name]
                self.flag(rule, node, f"import of {module}.{alias.name}")
            if self.function_stack:
                self.imported.add(alias.asname or alias.name)

    # -- names, calls, attributes ----------------------------------------------------------------

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_NAMES:
            self.flag("private-attribute", node, f"use of {node.id}")
        elif node.id in FORBIDDEN_BUILTINS and isinstance(node.ctx, ast.Load):
            if not any(node.id in scope for scope in self.function_stack) \
                    and node.id not in self.module_names:
                self.flag("forbidden-builtin", node, f"use of builtin {node.id}()")
        elif node.id == "getattr" and isinstance(node.ctx, ast.Load):
            # A direct call is checked in visit_Call; passing getattr around hides the name.
            self.flag("dynamic-attribute", node, "getattr used as a value")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "getattr":
            name = node.args[1] if len(node.args) >= 2 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.flag("dynamic-attribute", node, "getattr with a computed attribute name")
            elif name.value.startswith("_"):
                self.flag("private-attribute", node, f"getattr of private {name.value!r}")
            elif name.value in FORBIDDEN_ATTRIBUTES:
                attr = name.value
                self.flag(FORBIDDEN_ATTRIBUTES[attr], node, f"getattr(..., {attr!r})")
            for arg in node.args:
                self.visit(arg)
            for keyword in node.keywords:
                self.visit(keyword)
            return
        if isinstance(func, ast.Attribute) and func.attr in MUTATING_METHODS \
                and self.function_stack:
            root = _root_name(func.value)
            if root in self.imported and self._module_level(root):
                self.flag("monkeypatch", node, f"{_dotted(func)}() mutates an imported module's "
                          "state")
            elif self._module_level(root):
                self.flag("call-time-state", node, f"{_dotted(func)}() writes module-level "
                          f"{root!r} at call time (a result cache)")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr in FORBIDDEN_ATTRIBUTES:
            self.flag(FORBIDDEN_ATTRIBUTES[attr], node, f"use of {_dotted(node)}")
        elif attr in HOST_FILE_FUNCTIONS \
                and self.import_roots.get(_root_name(node) or "") in HOST_MODULES:
            self.flag("file-access", node, f"use of {_dotted(node)}")
        elif attr.startswith("__") and attr.endswith("__"):
            if attr not in ALLOWED_DUNDER_ATTRIBUTES:
                self.flag("private-attribute", node, f"use of {_dotted(node)}")
        elif attr.startswith("_"):
            base = node.value
            own = isinstance(base, ast.Name) and base.id in ("self", "cls")
            if not own:
                self.flag("private-attribute", node, f"use of private {_dotted(node)}")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._check_store(node)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._check_store(node)
        self.generic_visit(node)

    def _check_store(self, node: ast.Attribute | ast.Subscript) -> None:
        root = _root_name(node.value)
        verb = "assigns to" if isinstance(node.ctx, ast.Store) else "deletes"
        in_function = bool(self.function_stack)
        target = _dotted(node) if isinstance(node, ast.Attribute) else f"{root}[...]"
        if root in self.imported and (not in_function or self._module_level(root)):
            self.flag("monkeypatch", node, f"{verb} {target}, part of an imported module")
        elif in_function and self._module_level(root):
            self.flag("call-time-state", node, f"{verb} module-level {root!r} at call time "
                      "(a result cache)")

    # -- scopes and definitions -------------------------------------------------------------------

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        defaults = list(node.args.defaults) + [d for d in node.args.kw_defaults if d is not None]
        for default in defaults:
            mutable = isinstance(default, (ast.List, ast.Dict, ast.Set, ast.ListComp,
                                           ast.DictComp, ast.SetComp))
            if isinstance(default, ast.Call):
                callee = _dotted(default.func).rsplit(".", 1)[-1]
                mutable = callee in ("dict", "list", "set", "defaultdict", "OrderedDict",
                                     "Counter", "deque")
            if mutable:
                self.flag("call-time-state", default, "mutable default argument (state kept "
                          "across calls: a result cache)")
        if not isinstance(node, ast.Lambda):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if _dotted(target).rsplit(".", 1)[-1] in CACHING_DECORATORS \
                        and node.name == "kernel_fn":
                    self.flag("call-time-state", decorator, "kernel_fn's results are cached")
                self.visit(decorator)
        for default in defaults:
            self.visit(default)
        self.function_stack.append(_function_locals(node))
        body = node.body if isinstance(node.body, list) else [node.body]
        for stmt in body:
            self.visit(stmt)
        self.function_stack.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function
    visit_Lambda = _visit_function

    def visit_Global(self, node: ast.Global) -> None:
        self.flag("call-time-state", node, f"'global {', '.join(node.names)}': module-level "
                  "state written at call time")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.flag("call-time-state", node, f"'nonlocal {', '.join(node.names)}': state kept "
                  "across calls")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            if _dotted(base).rsplit(".", 1)[-1] in ("Tensor", "Parameter", "TensorBase"):
                self.flag("tensor-subclass", node, f"class {node.name} subclasses "
                          f"{_dotted(base)}")
        for keyword in node.keywords:
            if keyword.arg == "metaclass":
                self.flag("private-attribute", node, f"class {node.name} sets a metaclass")
        self.generic_visit(node)


def scan_source(source: str) -> list[Violation]:
    """Every rule the source breaks, in line order (empty: the scan passes)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [Violation("syntax", exc.lineno or 0, f"syntax error: {exc.msg}")]
    scanner = _Scanner()
    scanner.collect_module_names(tree)
    scanner.visit(tree)
    unique = {(v.line, v.rule, v.message): v for v in scanner.violations}
    return sorted(unique.values(), key=lambda v: (v.line, v.rule))


def summarize(violations: list[Violation], limit: int = 3) -> str:
    """One line for a BenchResult reason: the first few violations, and how many more."""
    shown = "; ".join(str(v) for v in violations[:limit])
    more = len(violations) - limit
    return shown + (f"; and {more} more" if more > 0 else "")
