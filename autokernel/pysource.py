"""Python source parsed into an AST, safely from several threads at once.

CPython 3.11 before 3.11.8 (and 3.12 before 3.12.2) can raise "SystemError: AST constructor
recursion depth mismatch" when two threads build AST objects at the same time (gh-106905): the
conversion kept its recursion depth in per-interpreter state. The Claude agent's checks and
`--gpus` workers parse kernel files from threads, so every parse goes through one lock here.
"""

from __future__ import annotations

import ast
import threading

_PARSING = threading.Lock()


def parse_source(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, one thread at a time."""
    with _PARSING:
        return ast.parse(source, filename)
