"""The Claude agent's tools: read the workspace, write or edit `kernel.py`, check it statically.

The tools work on an in-memory draft of kernel.py that starts as the current best; the loop writes
the final draft to disk, runs the harness and keeps or reverts it. So nothing here writes a file,
runs code, opens a socket or reaches outside the workspace: reads resolve every path (symlinks
included) and refuse anything that lands outside the workspace root or inside `.git`.

Tool schemas are plain dicts in the Messages API's `tools` format; `ToolBox.run(name, input)`
returns the text of the `tool_result` and whether it is an error.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autokernel.agents.base import MAX_SUGGESTED_CONFIGS
from autokernel.agents.claude_checks import CHECK_TOOL_SCHEMAS, CHECK_TOOLS, DraftChecks
from autokernel.kernelfile import ENTRY_POINT, KernelFileError, parse_kernel_source
from autokernel.pysource import parse_source
from autokernel.text import count_of

KERNEL_FILE = "kernel.py"
MAX_READ_CHARS = 40_000  # one tool result; a whole kernel file is far smaller
MAX_LIST_ENTRIES = 200
HIDDEN_DIRS = frozenset({".git", ".cache", "__pycache__"})  # private or noise
DESCRIPTION_CHARS = 160

SUGGESTED_CONFIGS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_SUGGESTED_CONFIGS,
    "items": {"type": "object"},
    "description": (
        f"up to {MAX_SUGGESTED_CONFIGS} configurations of the draft's TUNABLE_SPACE you expect to "
        "be fast, each a {name: value} dict of some tunables (the rest keep the draft's values); "
        "the tuner's sweep of this structure measures them first"
    ),
}

TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": (
            "Read a text file of the run's workspace (read-only). 'kernel.py' returns your current "
            "draft. Other useful files: reference.py (the oracles), program.md (the playbook), "
            "kernels/ (best kernels of finished targets). Paths are relative to the workspace."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "relative path, e.g. 'reference.py'"},
                "start_line": {"type": "integer", "minimum": 1, "description": "first line (1)"},
                "max_lines": {"type": "integer", "minimum": 1, "description": "lines to return"},
            },
            "required": ["path"],
        },
    },
    {
        "name": "list_files",
        "description": "List the files of a workspace directory (read-only).",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "directory, default '.'"}},
        },
    },
    {
        "name": "write_kernel",
        "description": (
            "Replace the whole kernel.py draft with `source`. Give a one-line `description` of the "
            "change (it becomes the commit message and the results.tsv row) and the `hypothesis` "
            "it tests. Returns the static check of the new draft."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "source": {"type": "string", "description": "the complete new kernel.py"},
                "description": {"type": "string", "description": "one line, what changed"},
                "hypothesis": {"type": "string", "description": "why it should be faster"},
                "suggested_configs": SUGGESTED_CONFIGS_SCHEMA,
            },
            "required": ["source", "description", "hypothesis"],
        },
    },
    {
        "name": "edit_kernel",
        "description": (
            "Replace the exact text `old` (which must occur exactly once in the kernel.py draft, "
            "whitespace included) by `new`. Prefer this to write_kernel for focused changes. "
            "Give `description` and `hypothesis` on at least one edit of the experiment."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "old": {"type": "string", "description": "exact text to replace, unique"},
                "new": {"type": "string", "description": "replacement text"},
                "description": {"type": "string", "description": "one line, what changed"},
                "hypothesis": {"type": "string", "description": "why it should be faster"},
                "suggested_configs": SUGGESTED_CONFIGS_SCHEMA,
            },
            "required": ["old", "new"],
        },
    },
    {
        "name": "check_kernel",
        "description": (
            "Statically check the kernel.py draft without running it: the kernel.py format, "
            "KERNEL_TYPE, kernel_fn's signature against the reference, TUNABLE_SPACE, and the "
            "harness's anti-cheat scan. compile_kernel and test_kernel go further; speed is "
            "measured after your turn."
        ),
        "input_schema": {"type": "object", "properties": {}},
    },
    *CHECK_TOOL_SCHEMAS,
]


class ToolError(Exception):
    """A tool call the agent got wrong; its message goes back as an error tool_result."""


def one_line(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """Collapse whitespace (tabs and newlines would break results.tsv) and cap the length."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class WorkspaceReader:
    """Read-only access to the workspace directory, confined to it.

    `overlay` maps relative paths to text served instead of the disk (kernel.py is the draft), so
    the agent can work without a workspace directory at all (then only the overlay is readable).
    """

    def __init__(self, root: str | Path | None, overlay: dict[str, str] | None = None) -> None:
        self.root = Path(root).resolve() if root is not None else None
        self.overlay = dict(overlay or {})

    def _resolve(self, path: str) -> Path:
        if self.root is None:
            raise ToolError(f"{path}: not available (no workspace directory in this run)")
        if not path or "\x00" in path:
            raise ToolError("empty or invalid path")
        candidate = Path(path)
        if candidate.is_absolute():
            raise ToolError(f"{path}: absolute paths are not allowed; use a relative path")
        # resolve() follows every symlink, so a link that points outside is caught here too.
        resolved = (self.root / candidate).resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise ToolError(f"{path}: outside the workspace")
        relative = resolved.relative_to(self.root)
        if any(part in HIDDEN_DIRS for part in relative.parts):
            raise ToolError(f"{path}: not readable ({'/'.join(relative.parts[:1])} is private)")
        return resolved

    @staticmethod
    def _normalize(path: str) -> str:
        return Path(path).as_posix().removeprefix("./")

    def read(self, path: str, start_line: int = 1, max_lines: int | None = None) -> str:
        key = self._normalize(path)
        if key in self.overlay:
            text = self.overlay[key]
        else:
            resolved = self._resolve(path)
            if not resolved.is_file():
                raise ToolError(f"{path}: no such file")
            data = resolved.read_bytes()
            if b"\x00" in data[:8192]:
                raise ToolError(f"{path}: binary file")
            text = data.decode("utf-8", errors="replace")
        lines = text.splitlines(keepends=True)
        start = max(1, int(start_line))
        stop = len(lines) if max_lines is None else min(len(lines), start - 1 + max(1, max_lines))
        chunk = "".join(lines[start - 1 : stop])
        note = ""
        if len(chunk) > MAX_READ_CHARS:
            chunk = chunk[:MAX_READ_CHARS]
            shown = start - 1 + chunk.count("\n")
            note = (f"\n[truncated at {MAX_READ_CHARS} characters; "
                    f"continue with start_line={shown + 1}]")
        elif stop < len(lines):
            note = f"\n[lines {start}-{stop} of {len(lines)}; continue with start_line={stop + 1}]"
        return chunk + note

    def list(self, path: str = ".") -> str:
        entries: set[str] = set()
        key = self._normalize(path or ".")
        prefix = "" if key in ("", ".") else key.rstrip("/") + "/"
        for name in self.overlay:
            if name.startswith(prefix):
                entries.add(name[len(prefix) :].split("/", 1)[0])
        if self.root is not None:
            directory = self._resolve(path or ".")
            if directory.is_dir():
                for child in directory.iterdir():
                    if child.name in HIDDEN_DIRS:
                        continue
                    entries.add(child.name + ("/" if child.is_dir() else ""))
            elif not entries:
                raise ToolError(f"{path}: no such directory")
        if not entries:
            return "(empty)"
        listed = sorted(entries)
        more = len(listed) - MAX_LIST_ENTRIES
        return "\n".join(listed[:MAX_LIST_ENTRIES]) + (f"\n[{more} more]" if more > 0 else "")


def _reference_parameters(kernel_type: str) -> list[inspect.Parameter] | None:
    from autokernel import reference

    oracle = getattr(reference, kernel_type, None)
    if oracle is None:
        return None
    return [
        p
        for p in inspect.signature(oracle).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


def _entry_signature_problem(tree: ast.Module, kernel_type: str) -> str | None:
    """kernel_fn must take the reference's positional arguments, in order."""
    expected = _reference_parameters(kernel_type)
    entry = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == ENTRY_POINT), None
    )
    if expected is None or entry is None:
        return None  # `kernel_fn = something` is legal; its signature is checked at run time
    args = entry.args
    if args.vararg is not None:
        return None
    positional = len(args.posonlyargs) + len(args.args)
    required = positional - len(args.defaults)
    expected_required = sum(1 for p in expected if p.default is inspect.Parameter.empty)
    wanted = f"{kernel_type}({', '.join(p.name for p in expected)})"
    # Trailing arguments added after kernels were written (`axis`, reduce's `op`) are passed only
    # to targets that need them; the harness refuses a kernel_fn without them there, so a
    # last-dim sum kernel may leave them out.
    from autokernel.integrate.custom_ops import LEGACY_TRAILING

    passed = list(expected)
    while passed and passed[-1].name in LEGACY_TRAILING:
        passed.pop()
    if positional < len(passed):
        return f"{ENTRY_POINT} takes {positional} positional arguments; the reference is {wanted}"
    if required > expected_required:
        # Callers may leave out the reference's optional arguments (eps, causal, scale...).
        return f"{ENTRY_POINT} requires {required} arguments; the reference is {wanted}"
    return None


def _harness_scan(source: str) -> list[str]:
    """The harness's own static anti-cheat scan, when the installed harness provides one."""
    try:
        from autokernel.harness import static_scan  # type: ignore[attr-defined]
    except ImportError:
        return []
    scan = getattr(static_scan, "scan_source", None)
    if scan is None:
        return []
    findings = scan(source)
    return [str(f) for f in findings or []]


def check_kernel_source(source: str, kernel_type: str) -> list[str]:
    """Problems that would make the harness reject the file outright; empty when none are found."""
    try:
        info = parse_kernel_source(source)
    except KernelFileError as exc:
        return [f"kernel.py format: {exc}"]
    problems: list[str] = []
    if info.kernel_type != kernel_type:
        problems.append(
            f"KERNEL_TYPE is {info.kernel_type!r} but this target is {kernel_type!r}"
        )
    signature = _entry_signature_problem(parse_source(source), kernel_type)
    if signature:
        problems.append(signature)
    for name, values in info.space.items():
        if info.tunables[name] not in values:
            problems.append(
                f"tunable {name} = {info.tunables[name]!r} is not one of its TUNABLE_SPACE values"
            )
    problems.extend(_harness_scan(source))
    return problems


@dataclass
class KernelDraft:
    """kernel.py as the agent is editing it during one experiment."""

    original: str
    kernel_type: str
    source: str = ""
    description: str = ""
    hypothesis: str = ""
    edits: int = 0
    suggested_configs: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.source:
            self.source = self.original

    @property
    def changed(self) -> bool:
        return self.source != self.original

    def problems(self) -> list[str]:
        return check_kernel_source(self.source, self.kernel_type)

    def _note(self, description: str | None, hypothesis: str | None) -> None:
        if description and description.strip():
            self.description = one_line(description)
        if hypothesis and hypothesis.strip():
            self.hypothesis = one_line(hypothesis, 400)

    def suggest(self, configs: Any) -> str:
        """Keep the configurations the model suggests for the tuner; '' or a note on what was
        dropped (not a point of the draft's TUNABLE_SPACE, or beyond the limit)."""
        if configs is None:
            return ""
        if not isinstance(configs, list):
            raise ToolError("suggested_configs must be a list of {tunable: value} objects")
        try:
            space = parse_kernel_source(self.source).space
        except (KernelFileError, SyntaxError, ValueError):
            space = {}
        kept: list[dict[str, Any]] = []
        dropped: list[str] = []
        for config in configs:
            bad = ("not an object" if not isinstance(config, dict) or not config else
                   next((f"{k}={v!r} is not in TUNABLE_SPACE" for k, v in config.items()
                         if k not in space or v not in space[k]), ""))
            if bad or len(kept) >= MAX_SUGGESTED_CONFIGS:
                dropped.append(bad or f"more than {MAX_SUGGESTED_CONFIGS}")
            elif config not in kept:
                kept.append(dict(config))
        self.suggested_configs = kept
        if not dropped:
            return f" {count_of(len(kept), 'suggested configuration')} noted for the tuner."
        return (f" {count_of(len(kept), 'suggested configuration')} noted; dropped "
                f"{len(dropped)}: {'; '.join(dropped[:3])}.")

    def report(self) -> str:
        problems = self.problems()
        lines = len(self.source.splitlines())
        if not problems:
            return f"kernel.py draft updated ({lines} lines). Static check: OK."
        listed = "\n".join(f"- {p}" for p in problems)
        return f"kernel.py draft updated ({lines} lines). Static check found problems:\n{listed}"

    def write(self, source: str, description: str | None, hypothesis: str | None) -> str:
        if not isinstance(source, str) or not source.strip():
            raise ToolError("write_kernel needs the complete kernel.py in `source`")
        self.source = source if source.endswith("\n") else source + "\n"
        self.edits += 1
        self._note(description, hypothesis)
        return self.report()

    def edit(self, old: str, new: str, description: str | None, hypothesis: str | None) -> str:
        if not isinstance(old, str) or not old:
            raise ToolError("edit_kernel needs a non-empty `old` text")
        if not isinstance(new, str):
            raise ToolError("edit_kernel needs a `new` text")
        count = self.source.count(old)
        if count == 0:
            raise ToolError(
                "`old` does not occur in kernel.py (it must match exactly, whitespace included); "
                "read_file('kernel.py') to see the current draft"
            )
        if count > 1:
            raise ToolError(f"`old` occurs {count} times in kernel.py; include more context")
        self.source = self.source.replace(old, new, 1)
        self.edits += 1
        self._note(description, hypothesis)
        return self.report()


@dataclass
class ToolBox:
    """Dispatches one experiment's tool calls to the draft and the workspace reader."""

    draft: KernelDraft
    reader: WorkspaceReader
    calls: dict[str, int] = field(default_factory=dict)
    checks: DraftChecks | None = None  # compile_kernel / test_kernel (claude_checks)

    def run(self, name: str, arguments: Any) -> tuple[str, bool]:
        self.calls[name] = self.calls.get(name, 0) + 1
        args = arguments if isinstance(arguments, dict) else {}
        try:
            if name == "read_file":
                self.reader.overlay[KERNEL_FILE] = self.draft.source
                return (
                    self.reader.read(
                        str(args.get("path", "")),
                        int(args.get("start_line") or 1),
                        int(args["max_lines"]) if args.get("max_lines") else None,
                    ),
                    False,
                )
            if name == "list_files":
                return self.reader.list(str(args.get("path") or ".")), False
            if name == "write_kernel":
                text = self.draft.write(
                    args.get("source"), args.get("description"), args.get("hypothesis"))
                return text + self.draft.suggest(args.get("suggested_configs")), False
            if name == "edit_kernel":
                text = self.draft.edit(args.get("old"), args.get("new"),
                                       args.get("description"), args.get("hypothesis"))
                return text + self.draft.suggest(args.get("suggested_configs")), False
            if name in CHECK_TOOLS:
                if self.checks is None:
                    raise ToolError(f"{name} is not available in this run")
                return self.checks.run(name, self.draft.source)
            if name == "check_kernel":
                problems = self.draft.problems()
                if not problems:
                    return "Static check: OK.", False
                listed = "\n".join(f"- {p}" for p in problems)
                return f"Static check found problems:\n{listed}", False
        except ToolError as exc:
            return str(exc), True
        except (TypeError, ValueError) as exc:
            return f"bad arguments for {name}: {exc}", True
        return f"unknown tool {name!r}; the tools are: " + ", ".join(
            t["name"] for t in TOOL_SCHEMAS
        ), True
