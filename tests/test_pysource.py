"""Parsing kernel sources from several threads at once (autokernel/pysource.py): CPython 3.11
before 3.11.8 raised "SystemError: AST constructor recursion depth mismatch" when two threads
built AST objects together (seen once in CI, in the Claude repair test's two threads; the race
is rare, so the first test hammers it and can only fail where it reproduces, and the second
keeps every parse of the package behind the lock)."""

from __future__ import annotations

import ast
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autokernel.pysource import parse_source

PACKAGE = Path(__file__).resolve().parents[1] / "autokernel"
NESTED = "def f(x):\n" + "".join(f"    {'    ' * d}if x > {d}:\n" for d in range(30)) \
    + "    " * 31 + "return [(x, {'k': (x, [x, (x,)])})]\n"


def test_many_threads_parse_deep_sources_together() -> None:
    sources = [NESTED + f"\ny = {n}\n" for n in range(400)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        trees = list(pool.map(parse_source, sources))
    assert all(isinstance(tree, ast.Module) and len(tree.body) == 2 for tree in trees)


def test_the_package_parses_python_source_only_through_the_lock() -> None:
    direct = [f"{path.relative_to(PACKAGE.parent)}:{n}"
              for path in PACKAGE.rglob("*.py") if path.name != "pysource.py"
              for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
              if re.search(r"\bast\.parse\(", line)]
    assert direct == []
