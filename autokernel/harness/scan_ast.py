"""AST helpers of the static scan: dotted names, attribute chains, and the names a scope binds."""

from __future__ import annotations

import ast
import string

def root_name(node: ast.expr) -> str | None:
    """`a` for `a.b.c`, `a[0].b`, `a.b(...)`; None when the chain starts with anything else."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Name):
            return node.id
        else:
            return None


def dotted(node: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts)) or "<expression>"


def pure_chain(node: ast.expr) -> tuple[str, list[str]] | None:
    """('np', ['lib', 'format']) for `np.lib.format`; None unless names and attributes only."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return node.id, list(reversed(parts))


NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def scope_bindings(nodes: list[ast.AST]) -> set[str]:
    """Names bound in the scope these statements run in: not inside nested functions, classes,
    lambdas or comprehensions (whose names are their own), except the nested definitions' own
    names and walrus targets in comprehensions (which bind in the enclosing scope)."""
    names: set[str] = set()
    pending = list(nodes)
    while pending:
        node = pending.pop()
        if isinstance(node, NESTED_SCOPES):
            if not isinstance(node, ast.Lambda):
                names.add(node.name)
                pending.extend(node.decorator_list)
            continue
        if isinstance(node, COMPREHENSIONS):
            names |= {n.target.id for n in ast.walk(node)
                      if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name)}
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names |= set(node.names)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
        pending.extend(ast.iter_child_nodes(node))
    return names


def function_locals(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names bound in a function's own scope: parameters and assignment targets."""
    args = func.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    body = func.body if isinstance(func.body, list) else [func.body]
    return names | scope_bindings(body)


def format_fields(template: str) -> list[str]:
    """Replacement fields of a str.format template that read an attribute or an item by name
    (`"{0.gi_frame}"`), nested format specs included."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return []
    found: list[str] = []
    for _, field, spec, _ in parsed:
        if field and ("." in field or "[" in field):
            found.append(field)
        if spec:
            found.extend(format_fields(spec))
    return found
