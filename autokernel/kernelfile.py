"""The `kernel.py` format, read and edited without importing (importing runs the candidate's code).

A kernel file is a Python module with, at module level:

    KERNEL_TYPE = "rmsnorm"          # one of autokernel.ops.KERNEL_TYPES
    BACKEND = "triton"               # or "cuda"
    def kernel_fn(x, weight, eps=1e-6): ...   # the reference's positional signature

A "cuda" file also holds its CUDA C++ source: a module-level string literal `CUDA_SOURCE`, or
`CUDA_FILE`, the name of a sibling `.cu` file (exactly one of the two). Its tunables reach the C++
as `-D NAME=value` defines (`cuda_defines`), so their values must be ints, bools (1/0), floats or
C identifiers.

and, optionally, tunables: plain module-level constants assigned a literal, whose legal values are
listed in a literal dict `TUNABLE_SPACE`:

    BLOCK_N = 1024
    NUM_WARPS = 8
    VARIANT = "one_pass"              # alternative implementations are tunables too
    TUNABLE_SPACE = {"BLOCK_N": [512, 1024, 2048], "NUM_WARPS": [4, 8, 16],
                     "VARIANT": ["one_pass", "two_pass"]}

A search agent changes a tunable by rewriting that one literal in the file's text (`set_tunables`),
so every candidate it tries is a real edit that git can diff, commit and revert.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autokernel.backends import BACKEND_NAMES
from autokernel.cuda.defines import CU_FILE_NAME, CudaDefineError
from autokernel.cuda.defines import cuda_define_value as _define_value
from autokernel.ops import KERNEL_TYPES
from autokernel.pysource import parse_source

BACKENDS: tuple[str, ...] = BACKEND_NAMES  # the registered kernel languages
ENTRY_POINT = "kernel_fn"
SPACE_NAME = "TUNABLE_SPACE"
CUDA_SOURCE_NAME = "CUDA_SOURCE"
CUDA_FILE_NAME = "CUDA_FILE"


class KernelFileError(ValueError):
    """The file does not follow the kernel.py format."""


@dataclass(frozen=True)
class KernelFileInfo:
    kernel_type: str
    backend: str
    tunables: dict[str, Any] = field(default_factory=dict)
    space: dict[str, list[Any]] = field(default_factory=dict)
    cuda_source: str | None = None  # a "cuda" file's inline CUDA_SOURCE
    cuda_file: str | None = None  # or the name of its sibling .cu file (CUDA_FILE)


def _module_assignments(tree: ast.Module) -> dict[str, ast.Assign | ast.AnnAssign]:
    found: dict[str, ast.Assign | ast.AnnAssign] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target = node.target
        else:
            continue
        if isinstance(target, ast.Name):
            found[target.id] = node  # the last assignment wins, as at import time
    return found


def _literal(node: ast.Assign | ast.AnnAssign, name: str) -> Any:
    try:
        return ast.literal_eval(node.value)
    except ValueError as exc:
        raise KernelFileError(f"{name} must be assigned a literal") from exc


def parse_kernel_source(source: str) -> KernelFileInfo:
    try:
        tree = parse_source(source)
    except SyntaxError as exc:
        raise KernelFileError(f"syntax error at line {exc.lineno}: {exc.msg}") from exc
    assigns = _module_assignments(tree)
    if "KERNEL_TYPE" not in assigns:
        raise KernelFileError("missing module-level KERNEL_TYPE")
    kernel_type = _literal(assigns["KERNEL_TYPE"], "KERNEL_TYPE")
    if kernel_type not in KERNEL_TYPES:
        raise KernelFileError(
            f"KERNEL_TYPE {kernel_type!r} is not one of: {', '.join(KERNEL_TYPES)}"
        )
    backend = _literal(assigns["BACKEND"], "BACKEND") if "BACKEND" in assigns else None
    if backend not in BACKENDS:
        raise KernelFileError(f"BACKEND must be one of {', '.join(BACKENDS)}; got {backend!r}")
    has_entry = any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == ENTRY_POINT
        for n in tree.body
    ) or ENTRY_POINT in assigns
    if not has_entry:
        raise KernelFileError(f"missing module-level {ENTRY_POINT}(...)")

    space: dict[str, list[Any]] = {}
    tunables: dict[str, Any] = {}
    if SPACE_NAME in assigns:
        raw = _literal(assigns[SPACE_NAME], SPACE_NAME)
        if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, (list, tuple)) and v for k, v in raw.items()
        ):
            raise KernelFileError(f"{SPACE_NAME} must map names to non-empty lists of values")
        space = {k: list(v) for k, v in raw.items()}
        for name in space:
            if name not in assigns:
                raise KernelFileError(f"tunable {name} has no module-level assignment")
            tunables[name] = _literal(assigns[name], name)
    if backend != "cuda":
        return KernelFileInfo(kernel_type, backend, tunables, space)
    cuda_source, cuda_file = _cuda_source_names(assigns)
    for name, values in space.items():
        for value in [tunables[name], *values]:
            cuda_define_value(value, name)  # raises for a value no -D define can carry
    return KernelFileInfo(kernel_type, backend, tunables, space, cuda_source, cuda_file)


def _cuda_source_names(assigns: dict[str, ast.Assign | ast.AnnAssign]
                       ) -> tuple[str | None, str | None]:
    has_source, has_file = CUDA_SOURCE_NAME in assigns, CUDA_FILE_NAME in assigns
    if has_source == has_file:
        raise KernelFileError(f"a cuda kernel file needs exactly one of {CUDA_SOURCE_NAME} (the "
                              f"CUDA C++ source as a string literal) or {CUDA_FILE_NAME} (a "
                              "sibling .cu file's name)")
    name = CUDA_SOURCE_NAME if has_source else CUDA_FILE_NAME
    value = _literal(assigns[name], name)
    if not isinstance(value, str) or not value.strip():
        raise KernelFileError(f"{name} must be a non-empty string literal")
    if has_file and not CU_FILE_NAME.match(value):
        raise KernelFileError(f"{CUDA_FILE_NAME} must name a .cu file beside kernel.py (no "
                              f"directories); got {value!r}")
    return (value, None) if has_source else (None, value)


def cuda_define_value(value: Any, name: str = "tunable") -> str:
    """`autokernel.cuda.defines.cuda_define_value`, refusing as a kernel-file error."""
    try:
        return _define_value(value, name)
    except CudaDefineError as exc:
        raise KernelFileError(str(exc)) from None


def cuda_defines(tunables: dict[str, Any]) -> dict[str, str]:
    """Every tunable as a -D define, by name (the build's and the runtime's one convention)."""
    return {name: cuda_define_value(value, name) for name, value in sorted(tunables.items())}


def cuda_source_text(info: KernelFileInfo, kernel_path: str | Path | None) -> str:
    """A cuda file's C++ source: the inline string, or its sibling CUDA_FILE read from disk."""
    if info.cuda_source is not None:
        return info.cuda_source
    if info.cuda_file is None:
        raise KernelFileError(f"not a cuda kernel file (backend {info.backend!r})")
    if kernel_path is None:
        raise KernelFileError(f"{CUDA_FILE_NAME} {info.cuda_file!r} needs the kernel file's path")
    path = Path(kernel_path).parent / info.cuda_file
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KernelFileError(f"cannot read {CUDA_FILE_NAME} {path}: {exc}") from exc


def read_kernel_file(path: str | Path) -> KernelFileInfo:
    return parse_kernel_source(Path(path).read_text())


def set_tunables(source: str, values: dict[str, Any]) -> str:
    """Return `source` with each named tunable's literal replaced; everything else byte-identical."""
    info = parse_kernel_source(source)
    unknown = set(values) - set(info.space)
    if unknown:
        raise KernelFileError(f"not tunables of this file: {', '.join(sorted(unknown))}")
    tree = parse_source(source)
    assigns = _module_assignments(tree)
    lines = source.splitlines(keepends=True)
    # Byte offsets of each line start, to splice by the AST's (line, col) positions.
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line.encode()))
    encoded = source.encode()
    edits = []
    for name, value in values.items():
        node = assigns[name].value
        begin = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno - 1] + node.end_col_offset
        edits.append((begin, end, repr(value).encode()))
    for begin, end, text in sorted(edits, reverse=True):
        encoded = encoded[:begin] + text + encoded[end:]
    result = encoded.decode()
    parse_kernel_source(result)  # the edit must leave a valid kernel file
    return result
