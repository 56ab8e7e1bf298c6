"""The static scan's rules: what a kernel file may import and touch, and the name of each rule
a candidate can break (`RULES`, part of the harness's output contract).

`autokernel.harness.static_scan` walks the file's AST and applies these tables; keeping them apart
lets a reader (or a second scanner, for another backend's source) see every rule in one place.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import types

from autokernel.backends.interface import Violation  # noqa: F401 - the scan's findings

# Root modules a kernel file may import. Everything else is rejected: the list is an allow-list.
ALLOWED_IMPORT_ROOTS: frozenset[str] = frozenset({
    "__future__", "abc", "cmath", "collections", "dataclasses", "enum", "functools", "itertools",
    "math", "numbers", "numpy", "operator", "torch", "triton", "typing", "typing_extensions",
})

# Submodules of allowed roots that reach compilers, files, processes or the network.
FORBIDDEN_SUBMODULES: frozenset[str] = frozenset({
    "cpp_extension", "ctypeslib", "distributed", "distutils", "f2py", "hub", "multiprocessing",
})

# Modules of allowed roots an honest kernel never needs, by the rule their use breaks; matched on
# imports and on attribute chains followed through import aliases (`np.lib.format`).
FORBIDDEN_MODULE_PATHS: dict[str, str] = {
    "torch.library": "op-registration",
    "torch._library": "op-registration",
    "torch.overrides": "tensor-subclass",
    "torch.utils.dlpack": "host-readout",
    "torch.utils.collect_env": "module-escape",
    "torch.utils.benchmark": "module-escape",
    "torch.utils.data": "thread",
    "torch.utils.tensorboard": "file-access",
    "torch.utils.file_baton": "file-access",
    "torch.utils.show_pickle": "file-access",
    "torch.serialization": "file-access",
    "torch.package": "module-escape",
    "torch.fx": "module-escape",
    "torch.jit": "library-fallback",
    "torch.export": "library-fallback",
    "torch.compiler": "library-fallback",
    "torch.onnx": "file-access",
    "torch.profiler": "file-access",
    "torch.cuda.jiterator": "library-fallback",
    "torch.cuda.graph": "library-fallback",
    "torch.cuda.graphs": "library-fallback",
    "torch.cuda.tunable": "file-access",
    "torch.autograd.profiler": "file-access",
    "torch.utils.hipify": "file-access",
    "torch.utils.model_zoo": "module-escape",
    "numpy.lib.format": "file-access",
    "numpy.lib.npyio": "file-access",
    "numpy.testing": "module-escape",
    "numpy.ctypeslib": "module-escape",
    "triton.knobs": "launch-hook",
    "triton.runtime.build": "module-escape",
    "triton.runtime.cache": "file-access",
    "triton.backends": "module-escape",
    "triton.tools": "module-escape",
    "triton.profiler": "file-access",
}

# Why the commonly attempted modules are refused (the message names the reason).
REFUSED_MODULE_REASONS: dict[str, str] = {
    **dict.fromkeys(("os", "sys", "pathlib", "shutil", "io", "tempfile", "glob"),
                    "process and file-system access"),
    **dict.fromkeys(("subprocess", "multiprocessing", "signal", "resource"), "process control"),
    **dict.fromkeys(("socket", "urllib", "http", "requests", "ftplib", "ssl", "asyncio"),
                    "network access"),
    **dict.fromkeys(("ctypes", "cffi", "mmap"), "native code and raw memory"),
    **dict.fromkeys(("threading", "_thread", "concurrent"), "background threads"),
    **dict.fromkeys(("importlib", "builtins", "inspect", "gc", "types", "weakref", "code", "runpy",
                     "traceback"), "interpreter introspection"),
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

# Module-level names Python binds in every module (free names that are not undefined).
MODULE_DUNDERS: frozenset[str] = frozenset({"__name__", "__doc__", "__file__", "__annotations__"})

# Attribute names that reach forbidden things through an allowed module (`torch.os.environ`,
# `np.save`, `x.numpy()`), grouped by the rule they break.
FORBIDDEN_ATTRIBUTES: dict[str, str] = {
    **dict.fromkeys(("environ", "getenv", "putenv", "unsetenv"), "environment-access"),
    **dict.fromkeys(("os", "sys", "subprocess", "socket", "ctypes", "threading", "multiprocessing",
                     "importlib", "builtins", "inspect", "gc", "signal", "pickle", "marshal",
                     "shutil", "pathlib", "system", "popen", "traceback",
                     # shells, compilers and native code behind allowed modules
                     "collect_env", "ctypeslib", "extbuild", "build_and_import_extension",
                     "compile_module_from_src", "nvsmi", "set_gpu_clock", "jiterator",
                     "CUDAPluggableAllocator", "change_current_allocator", "nccl", "load_binary",
                     "launcher_cls",
                     # these evaluate strings as code (string annotations)
                     "get_type_hints", "ForwardRef", "evaluate_forward_ref", "singledispatch",
                     "singledispatchmethod"), "module-escape"),
    **dict.fromkeys(("from_file", "tofile", "fromfile", "memmap", "loadtxt", "savetxt",
                     "genfromtxt", "savez", "savez_compressed", "cpp_extension", "load_inline",
                     "load_library", "hub", "fromregex", "open_memmap", "DataSource", "npyio",
                     "read_array", "write_array", "show_pickle", "file_baton", "dump"),
                    "file-access"),
    **dict.fromkeys(("Stream", "stream", "set_stream", "ExternalStream", "wait_stream",
                     "StreamContext"), "side-stream"),
    **dict.fromkeys(("Thread", "ThreadPoolExecutor", "ProcessPoolExecutor", "Process", "Pool"),
                    "thread"),
    **dict.fromkeys(("as_subclass", "_make_subclass", "__torch_function__", "__torch_dispatch__",
                     "overrides", "TorchFunctionMode", "TorchDispatchMode"), "tensor-subclass"),
    **dict.fromkeys(("attrgetter", "methodcaller"), "dynamic-attribute"),
    # Reading a tensor's values on the host, or viewing raw memory from numpy.
    **dict.fromkeys(("numpy", "tolist", "item", "storage", "untyped_storage", "dlpack",
                     "to_dlpack", "from_dlpack", "from_numpy", "frombuffer", "as_array",
                     "as_ctypes", "from_address", "from_buffer", "from_buffer_copy", "apply_",
                     "map_", "map2_"), "host-readout"),
    # Work replayed outside the file's Triton launches (a captured graph of torch ops).
    **dict.fromkeys(("CUDAGraph", "make_graphed_callables", "graph_pool_handle"),
                    "library-fallback"),
    # Operators defined or re-registered by the file: torch compute under an allowed name.
    **dict.fromkeys(("library", "Library", "custom_op", "triton_op", "wrap_triton",
                     "register_kernel", "register_fake", "register_autograd",
                     "register_torch_dispatch", "register_vmap", "impl_abstract", "py_impl",
                     "fallthrough_kernel"), "op-registration"),
    # Code Triton runs inside a launch, where it is taken for Triton's own.
    **dict.fromkeys(("add_pre_run_hook", "pre_run_hooks", "knobs", "launch_enter_hook",
                     "launch_exit_hook", "kernel_load_start_hook", "kernel_load_end_hook",
                     "jit_cache_hook", "jit_post_compile_hook", "add_stages_inspection_hook"),
                    "launch-hook"),
    # Frames, code objects and tracebacks: the harness's state, reached through the stack.
    **dict.fromkeys(("gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended",
                     "cr_frame", "cr_code", "cr_await", "cr_origin", "cr_running", "cr_suspended",
                     "ag_frame", "ag_code", "ag_await", "ag_running", "f_back", "f_locals",
                     "f_globals", "f_builtins", "f_code", "f_trace", "f_trace_lines",
                     "f_trace_opcodes", "f_lasti", "f_lineno", "f_generator", "tb_frame",
                     "tb_next", "tb_lasti", "tb_lineno", "cell_contents", "with_traceback",
                     "currentframe", "getouterframes", "getinnerframes", "getargvalues",
                     "getframeinfo", "getclosurevars", "getgeneratorlocals",
                     "getcoroutinelocals"), "introspection"),
    "compile": "library-fallback",
}

# Code-object attributes (co_consts, co_names, ...): introspection too.
CODE_ATTRIBUTE = re.compile(r"^co_[a-z]+$")

# Protocols through which numpy views foreign memory, or torch hands a tensor's values out; a
# kernel file that defines one (a method, a class attribute, a dict key) is making a host view.
HOST_PROTOCOLS: frozenset[str] = frozenset({
    "__array__", "__array_interface__", "__array_struct__", "__array_function__",
    "__array_ufunc__", "__array_wrap__", "__array_finalize__", "__array_prepare__",
    "__array_priority__", "__dlpack__", "__dlpack_device__", "__cuda_array_interface__",
    "__buffer__", "__release_buffer__",
})
TORCH_PROTOCOLS: frozenset[str] = frozenset({"__torch_function__", "__torch_dispatch__"})

# `torch.save`/`np.load` read and write files (and unpickle code); `tl.load` is a Triton load.
HOST_FILE_FUNCTIONS: frozenset[str] = frozenset({"save", "load"})
HOST_MODULES: frozenset[str] = frozenset({"torch", "numpy"})

# Dunder attributes harmless enough to allow (everything else private is refused).
ALLOWED_DUNDER_ATTRIBUTES: frozenset[str] = frozenset({
    "__name__", "__qualname__", "__doc__", "__init__", "__call__", "__len__",
})

# Methods that mutate a container in place: called on a module-level name inside a function,
# they are call-time state (a cache). Tensor methods ending in "_" (in-place ops) count too.
MUTATING_METHODS: frozenset[str] = frozenset({
    "append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem", "clear",
    "remove", "discard", "__setitem__", "appendleft", "extendleft", "popleft", "rotate", "sort",
    "reverse", "move_to_end", "send", "put", "put_nowait",
})

# Calls whose result is an object held by the container they are called on (an alias of its
# state, not a copy).
INNER_OBJECT_METHODS: frozenset[str] = frozenset({"get", "setdefault", "pop", "popitem"})

# Methods where a class sets up its own instance: state written anywhere else is call-time state.
CONSTRUCTORS: frozenset[str] = frozenset({"__init__", "__post_init__", "__new__", "__set_name__",
                                          "__init_subclass__"})

CACHING_DECORATORS: frozenset[str] = frozenset({"cache", "lru_cache", "cached_property"})

CONFIG_CACHE_ADVICE = ("; to cache launch configurations, use @functools.cache on a helper of "
                       "shapes and dtypes")

RULES: dict[str, str] = {
    "syntax": "the file must parse",
    "encoding": "UTF-8 only: no coding declaration of another encoding (Python would run "
                "another program than the one checked)",
    "import-not-allowed": "imports only from an allow-list (torch, triton, numpy, math, functools, "
                          "typing, dataclasses, itertools, operator, enum, collections, ...)",
    "forbidden-builtin": "no open/exec/eval/compile/__import__/globals/vars/setattr/delattr/id",
    "dynamic-attribute": "getattr only with a literal public name; no attrgetter/methodcaller; no "
                         "attribute or index fields in format strings",
    "environment-access": "no access to environment variables",
    "module-escape": "no reaching os/sys/subprocess/shells/native code, or any module off the "
                     "allow-list, through another module (enum.bltns, typing_extensions.io)",
    "file-access": "no reading or writing files, no compiling native extensions",
    "private-attribute": "no private or dunder attributes (interpreter and torch internals), "
                         "also not through match patterns; self/cls only as a method's own",
    "monkeypatch": "no assigning to or deleting attributes of imported modules or their members",
    "side-stream": "no CUDA streams: the work must run on the harness's stream",
    "thread": "no threads or processes",
    "tensor-subclass": "no tensor subclasses or torch function/dispatch modes (lazy outputs)",
    "call-time-state": "no state kept across calls: module-level, closure or instance state "
                       "written while kernel_fn runs (result caching)",
    "library-fallback": "no torch.compile/TorchScript: the kernel must be the file's own Triton "
                        "code",
    "host-readout": "no reading tensor values on the host (numpy(), tolist(), item(), dlpack, "
                    "numpy's array protocols, ctypes views): compute in Triton",
    "op-registration": "no torch.library registrations (custom ops, kernel overrides)",
    "launch-hook": "no Triton launch hooks (pre_run_hooks, triton.knobs)",
    "introspection": "no frames, code objects or tracebacks (the harness's state)",
    "undefined-name": "every name must be bound in the file or be a builtin",
    # The C++ text of a BACKEND = "cuda" file (autokernel.cuda.scan.CUDA_RULES says more).
    "host-memory": "CUDA source: no cudaMalloc/cudaFree/cudaMemcpy/cudaMemset (torch allocates)",
    "inline-asm": "CUDA source: no inline assembly that calls out (call, trap, exit, syscall)",
    "preprocessor-escape": "CUDA source: no token pasting, universal character names, macro "
                           "includes or unusual pragmas",
}


def attribute_rule(name: str) -> str | None:
    """The rule an attribute (or imported member) of this name breaks, if any."""
    if name in FORBIDDEN_ATTRIBUTES:
        return FORBIDDEN_ATTRIBUTES[name]
    if CODE_ATTRIBUTE.match(name):
        return "introspection"
    if name in HOST_PROTOCOLS:
        return "host-readout"
    return None


def module_path_rule(path: str) -> str | None:
    """The rule a use of the dotted module path `path` (or anything inside it) breaks."""
    for prefix, rule in FORBIDDEN_MODULE_PATHS.items():
        if path == prefix or path.startswith(prefix + "."):
            return rule
    return None


def check_module(name: str, line: int) -> Violation | None:
    parts = name.split(".")
    root = parts[0]
    if root not in ALLOWED_IMPORT_ROOTS:
        why = REFUSED_MODULE_REASONS.get(root, "not on the import allow-list")
        return Violation("import-not-allowed", line, f"import of {name!r} ({why})")
    for part in parts[1:]:
        if part.startswith("_") or part in FORBIDDEN_SUBMODULES:
            return Violation("import-not-allowed", line, f"import of {name!r} (private or "
                             "process/file/compiler submodule)")
    rule = module_path_rule(name)
    if rule is not None:
        return Violation(rule, line, f"import of {name!r}")
    return None


# A PEP 263 coding declaration, in the first two lines.
CODING_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
UTF8_NAMES = frozenset({"utf-8", "utf8", "utf-8-sig", "utf_8", "u8"})


def coding_problem(source: str) -> str | None:
    """Why the file's coding declaration makes Python read another program than the UTF-8 text
    scanned here (`# coding: utf-7` turns `+AAo-` into a newline), or None."""
    for line in source.splitlines()[:2]:
        match = CODING_COOKIE.match(line)
        if match and match.group(1).lower().replace("_", "-") not in UTF8_NAMES:
            return (f"declares the source encoding {match.group(1)!r}: Python would run "
                    "another program than the UTF-8 text that is checked (only UTF-8 is "
                    "accepted)")
    return None


# Modules whose public objects a kernel may not reach through an allowed module either
# (`torch.xpu.cast` is ctypes.cast, `triton.compiler.compiler.Path` is pathlib.Path): the refused
# modules, their C halves and the file and process plumbing behind them.
FORBIDDEN_OBJECT_MODULES: tuple[str, ...] = (
    *REFUSED_MODULE_REASONS, "posix", "posixpath", "genericpath", "ntpath", "_io", "_ctypes",
    "_pickle", "_socket", "_signal", "_weakref", "_posixsubprocess", "_imp", "_frozen_importlib",
    "_frozen_importlib_external", "pkgutil", "zipimport", "linecache", "codecs", "fileinput",
    "faulthandler", "fcntl", "select", "selectors", "atexit", "site", "sysconfig", "platform",
    "zipfile", "tarfile", "logging", "webbrowser", "pty", "tty", "termios", "dis", "pdb",
)
# Harmless values every namespace shares (constants, the builtin types): never an escape.
_INERT = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, type(...),
          type(NotImplemented))
# Allowed modules of the standard library: what they export themselves is allowed, even where a
# forbidden module re-exports the same object (os.Mapping is collections.abc.Mapping).
_ALLOWED_STDLIB = ("abc", "cmath", "collections", "collections.abc", "dataclasses", "enum",
                   "functools", "itertools", "math", "numbers", "operator", "typing")


@functools.cache
def _forbidden_objects() -> dict[int, tuple[object, str]]:
    """id -> (object, dotted name) for every public object of a forbidden module, the
    dangerous builtins and sys.modules; built once (the objects are kept, so ids stay valid)."""
    import builtins
    import sys

    allowed: set[int] = {id(value) for name, value in vars(builtins).items()
                         if name not in FORBIDDEN_BUILTINS}
    for name in _ALLOWED_STDLIB:
        allowed |= {id(value) for key, value in vars(importlib.import_module(name)).items()
                    if not key.startswith("_")}
    table: dict[int, tuple[object, str]] = {id(sys.modules): (sys.modules, "sys.modules")}
    for name in FORBIDDEN_BUILTINS:
        if hasattr(builtins, name):
            value = getattr(builtins, name)
            table[id(value)] = (value, f"builtins.{name}")
    for module_name in FORBIDDEN_OBJECT_MODULES:
        try:
            module = importlib.import_module(module_name)
        except Exception:  # not installed here: nothing of it can be reached either
            continue
        for key, value in list(vars(module).items()):
            if key.startswith("__") or isinstance(value, (_INERT, types.ModuleType)) \
                    or id(value) in allowed:
                continue
            table.setdefault(id(value), (value, f"{module_name}.{key}"))
    return table


def forbidden_object(value: object) -> str | None:
    """What `value` is, when it is an object a kernel may not hold: a module off the allow-list,
    a public object of a forbidden module (ctypes.cast, pathlib.Path, os.system), a dangerous
    builtin, sys.modules or a module's namespace dict; else None."""
    if isinstance(value, types.ModuleType):
        name = getattr(value, "__name__", "?")
        if not isinstance(name, str) or name.split(".")[0] not in ALLOWED_IMPORT_ROOTS or any(
                piece.startswith("_") for piece in name.split(".")[1:]) \
                or module_path_rule(name) is not None:
            return f"the module {name} (not on the import allow-list)"
        return None
    if isinstance(value, _INERT):
        return None
    entry = _forbidden_objects().get(id(value))
    if entry is not None and entry[0] is value:
        module = entry[1].rsplit(".", 1)[0]
        return f"{entry[1]} (of the module {module}, not on the import allow-list)"
    if isinstance(value, dict):
        import sys

        if value is sys.modules:
            return "sys.modules (the interpreter's table of modules)"
        for module in list(sys.modules.values()):
            if getattr(module, "__dict__", None) is value:
                return f"the namespace of the module {getattr(module, '__name__', '?')}"
    return None


@functools.cache
def foreign_module(path: str) -> str | None:
    """What the dotted `path` reaches, through an allowed module's attributes, that a kernel may
    not hold (`forbidden_object`), if anything: `enum.bltns` is the module builtins,
    `typing_extensions.io` is io, `torch.xpu.cast` is ctypes.cast, `triton.language.extra.modules`
    is sys.modules. Looked up in the installed libraries (the scan's own process imports them;
    the candidate is never imported here); the answer reads "which is <answer>"."""
    parts = path.split(".")
    if parts[0] not in ALLOWED_IMPORT_ROOTS or any(p.startswith("_") for p in parts[1:]):
        return None  # a private name is the private-attribute rule's
    try:
        value: object = importlib.import_module(parts[0])
    except Exception:
        return None
    for index, part in enumerate(parts[1:], start=1):
        try:
            if isinstance(value, (types.ModuleType, type)) or callable(value):
                value = getattr(value, part)
            else:  # an instance: its attribute as stored, running no property of it
                value = inspect.getattr_static(value, part)
        except Exception:
            try:
                value = importlib.import_module(".".join(parts[: index + 1]))
            except Exception:
                return None
        found = forbidden_object(value)
        if found is not None:
            return found
    return None
