"""The contract between the harness and a kernel language: what a backend does for its kernel
files, and the records both sides share. The harness and every backend import this module; the
harness never imports a backend, it asks the registry (`autokernel.backends.backend`).

A backend, for a kernel file that declares `BACKEND = "<its name>"`:

- **scan**: `runtime_modules` (what its files may import beyond the scan's allow-list),
  `sidecar_text` (a source file the kernel file names) and `scan_parts` (its own rules on the
  parts of the file that are not Python, e.g. C++ text);
- **build**: `build` compiles the file in the trusted runner before anything of it runs, and
  returns what the candidate process loads (`Build.entries`); None when the language builds at
  its first launch (Triton's JIT);
- **load**: `prepare_candidate` runs in the sandboxed candidate process before kernel.py is
  imported: it loads the runner's builds and forbids any other;
- **count launches and ghost replay**: `install_launch_counter` hooks the language's launch path
  into the harness's `LaunchCounter`: each launch counts, its stream is checked, and in ghost
  mode it is skipped (an output still right without the launch was cached);
- **compile check**: `aot_check` compiles the file for a GPU target without one;
- `cpu_refusal`: why its kernels cannot run on `--device cpu` (None: they can).

The build cache and the harness's other caches live under `cache_dir()`.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

CACHE_ENV = "AUTOKERNEL_CACHE_DIR"


def cache_dir() -> Path:
    """Where autokernel caches builds, baselines and measured ceilings (per user, or
    $AUTOKERNEL_CACHE_DIR)."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "autokernel"


@dataclass(frozen=True)
class Violation:
    """One static-scan finding: the rule broken, the line, and what was found."""

    rule: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message} [{self.rule}]"


@dataclass
class AotResult:
    """One kernel's ahead-of-time compile check."""

    kernel: str
    ok: bool
    error: str = ""
    context: str = ""
    """Where the launch came from, e.g. "bf16 4x1000"."""
    signature: dict[str, str] = field(default_factory=dict)
    constexprs: dict[str, Any] = field(default_factory=dict)
    num_warps: int | None = None
    num_stages: int | None = None
    grid: list[int] | None = None
    n_regs: int | None = None
    shared_bytes: int | None = None
    local_bytes: int | None = None
    """Per-thread local memory: register spills (and stack arrays); 0 is what you want."""
    warnings: list[str] = field(default_factory=list)
    detail: str = ""
    """The whole error text (`error` keeps its first lines): the compiler's message with the
    offending source, bounded to DETAIL_CHARS."""


class BuildError(Exception):
    """A kernel file did not build; `str()` is its first error lines, `detail` the whole log."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


@dataclass(frozen=True)
class Build:
    """A kernel file built in the trusted runner: what the candidate process loads
    (`entries`, the backend's own format, JSON-able), and how the build went."""

    entries: list[list[str]]
    seconds: float
    cached: bool
    target: str  # what it was built for, e.g. sm_90a


class LaunchCounter(Protocol):
    """What a backend's launch hook sees of the harness's launch monitor."""

    armed: bool  # the candidate's code is running
    ghost: bool  # ghost replay: skip every launch
    launches: int
    signatures: list[tuple[Any, ...]] | None  # while a list: each launch, for launch_digest
    installed: dict[str, tuple[type, str, Any]]  # what was patched, for the integrity checks
    triton_prefixes: tuple[str, ...]

    def check_stream(self, explicit: Any = None) -> None: ...

    def wrap_run(self, cls: type, label: str) -> None: ...

    def wrap_getitem(self, cls: type, label: str) -> None: ...


class KernelBackend:
    """A kernel language. The defaults are those of a language with nothing to build, load or
    scan beyond Python, whose files run on the CPU too."""

    name: str = ""
    cpu_refusal: str | None = None
    runtime_modules: dict[str, frozenset[str]] = {}

    def sidecar_text(self, info: Any, path: Path) -> str | None:
        """The text of a source file the kernel file names beside it (read by the runner for
        the scan; None: there is none). Raises the kernel file's format error when unreadable."""
        return None

    def scan_parts(self, tree: ast.Module, sidecar_text: str | None) -> list[Violation]:
        """The backend's own rules on the file's non-Python parts (`sidecar_text`: a source file
        the kernel file names, read by the runner)."""
        return []

    def build(self, info: Any, path: Path, cache: Path, timeout_s: float,
              target: str | None = None) -> Build | None:
        """Compile the kernel file (raises BuildError); None when nothing is built ahead."""
        return None

    def prepare_candidate(self, entries: list[list[str]]) -> None:
        """In the candidate process, before the sandbox and the import of kernel.py."""

    def install_launch_counter(self, monitor: LaunchCounter) -> None:
        """Hook the language's launches into the monitor (count, stream check, ghost skip)."""

    def aot_check(self, path: str | Path, arch: int) -> list[AotResult]:
        raise NotImplementedError(f"the {self.name} backend has no compile check")


def declared_backend(tree: ast.Module) -> str | None:
    """The `BACKEND = "..."` a kernel file assigns at module level (None when it assigns none)."""
    for node in tree.body:
        if (isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "BACKEND" for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return None
