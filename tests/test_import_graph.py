"""The package's layering, read statically from its source (ast, no import runs; < 2 s).

- Nothing outside `autokernel/cli/` imports the command line (the pipeline is below it).
- No `_private` name is imported across a top-level package border: what one package offers
  another is public and documented (e.g. integrate/route_helpers.py for the op entries).
- No cycle of module imports spans two top-level packages (or top-level modules). Every import
  counts, function-level ones too, and importing `a.b.c` runs `a/b/__init__.py` first, so it
  counts as importing that as well; only `if TYPE_CHECKING:` blocks, which never run, are left
  out. The backend registry (autokernel/backends/__init__.py) names its implementations as
  strings and imports them on first use, so the harness depends on the interface, not on them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "autokernel"
# The command line's own entry point: `python -m autokernel` is the CLI.
CLI_ENTRY_POINTS = {"autokernel.__main__"}


@dataclass(frozen=True)
class Import:
    importer: str  # the importing module, dotted
    module: str  # the module imported (the deepest that exists)
    name: str | None  # the name taken from it (`from module import name`), else None
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def floor(module: str) -> str:
    """The top-level package (or top-level module) a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _runtime_nodes(statements: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: in any block at any depth (functions, classes,
    try, if...), outside `if TYPE_CHECKING:`. Only statements are visited: an import is one."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending = list(statements)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            continue
        type_only = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for block in ("orelse",) if type_only else ("body", "orelse", "finalbody", "handlers"):
            pending.extend(getattr(node, block, ()))
        for case in getattr(node, "cases", ()):  # match statements
            pending.extend(case.body)
    return found


@lru_cache(maxsize=1)  # one parse of the package for the whole file
def package_imports() -> tuple[frozenset[str], tuple[Import, ...]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    found: list[Import] = []
    for importer, path in modules.items():
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.Import):
                found += [Import(importer, alias.name, None, node.lineno)
                          for alias in node.names if alias.name.split(".")[0] == "autokernel"]
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "autokernel":
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:  # `from package import submodule`
                    found.append(Import(importer, submodule, None, node.lineno))
                else:
                    found.append(Import(importer, source, alias.name, node.lineno))
    return frozenset(modules), tuple(found)


def import_graph(modules: frozenset[str], imports: tuple[Import, ...]) -> dict[str, set[str]]:
    """Module → the modules importing it runs: the module and each package above it."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        parts = imp.module.split(".")
        for depth in range(2, len(parts) + 1):  # autokernel/__init__ itself runs for any
            ran = ".".join(parts[:depth])
            if ran in modules and ran != imp.importer:
                graph[imp.importer].add(ran)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively (the graph is deep enough to exhaust recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def test_nothing_outside_the_cli_imports_it() -> None:
    _, imports = package_imports()
    offenders = [f"{i.importer}:{i.line} imports {i.module}" for i in imports
                 if floor(i.module) == "cli" and floor(i.importer) != "cli"
                 and i.importer not in CLI_ENTRY_POINTS]
    assert not offenders, "the pipeline is below the CLI:\n" + "\n".join(offenders)


def test_no_private_name_crosses_a_package_border() -> None:
    _, imports = package_imports()
    offenders = [f"{i.importer}:{i.line} takes {i.name} from {i.module}" for i in imports
                 if i.name and i.name.startswith("_") and not i.name.startswith("__")
                 and floor(i.module) != floor(i.importer)]
    assert not offenders, ("make the name public (and documented) where it is defined:\n"
                           + "\n".join(offenders))


def test_no_import_cycle_spans_two_top_level_packages() -> None:
    modules, imports = package_imports()
    graph = import_graph(modules, imports)
    circles = []
    for component in strongly_connected(graph):
        floors = {floor(m) for m in component}
        if len(component) > 1 and len(floors) > 1:
            members = set(component)
            borders = sorted(f"{m} -> {t}" for m in component for t in graph[m]
                             if t in members and floor(t) != floor(m))
            circles.append(f"{sorted(floors)}: " + "; ".join(borders))
    assert not circles, "import circles across packages:\n" + "\n".join(circles)


def test_the_graph_sees_function_level_imports_and_parent_packages() -> None:
    """The walk itself: an import inside a function counts, and so does the package above it."""
    modules, imports = package_imports()
    graph = import_graph(modules, imports)
    # kernelbench/problem.py imports the pipeline's stages inside run_stage
    assert "autokernel.pipeline.stages" in graph["autokernel.kernelbench.problem"]
    assert "autokernel.pipeline" in graph["autokernel.kernelbench.problem"]
    cycle = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert sorted(map(sorted, strongly_connected(cycle))) == [["a", "b", "c"], ["d"]]
