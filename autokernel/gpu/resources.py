"""Registers, spills and shared memory of a kernel.py's launches, without a GPU, cached and bounded.

`autokernel.aot` compiles each launch that `kernel_fn` makes at one shape for an NVIDIA
architecture (Triton ships ptxas, so this works on a CPU machine) and reads the cubin's resource
usage. An agent's prompt wants those figures for the current best and the latest candidate, but
a prompt must never wait long: `ResourceProbe` runs the check in a child process of its own
session with a time limit (killing the whole process group on expiry), and caches every answer
by a hash of the source, the shape, the dtype and the architecture, in memory and, given a
folder, on disk (so a resumed run does not compile the same best again).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autokernel.files import atomic_write_text

DEFAULT_TIMEOUT_S = 45.0
RESOURCES_ENV = "AUTOKERNEL_KERNEL_RESOURCES"  # "0" turns the compile off (the CPU test suite)


@dataclass(frozen=True)
class LaunchResources:
    """One compiled launch: what `autokernel.aot` reports of it."""

    kernel: str
    num_warps: int | None = None
    num_stages: int | None = None
    grid: list[int] = field(default_factory=list)
    registers: int | None = None  # per thread
    spill_bytes: int | None = None  # local memory per thread: register spills, stack arrays
    shared_bytes: int | None = None  # per block
    constexprs: dict[str, Any] = field(default_factory=dict)
    error: str = ""  # the compile error or the launch limit it breaks; "" when it compiled

    @property
    def grid_blocks(self) -> int:
        blocks = 1
        for dim in self.grid or [1]:
            blocks *= int(dim)
        return blocks


@dataclass(frozen=True)
class ResourceReport:
    launches: list[LaunchResources]
    error: str = ""  # why there are no launches (a crash, a timeout, a kernel that won't load)
    arch: int = 90
    seconds: float = 0.0  # how long the compile took (0 for a cached answer)


Runner = Callable[[Path, Sequence[int], str, int, float], ResourceReport]
"""(kernel file, shape, dtype name, arch, timeout) -> report: the compile, replaceable in tests."""


def _first_line(text: str, limit: int = 200) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def launches_from_json(rows: list[dict[str, Any]]) -> list[LaunchResources]:
    """`python -m autokernel.aot check --json` rows as `LaunchResources`."""
    return [LaunchResources(
        kernel=str(row.get("kernel", "?")), num_warps=row.get("num_warps"),
        num_stages=row.get("num_stages"), grid=list(row.get("grid") or []),
        registers=row.get("n_regs"), spill_bytes=row.get("local_bytes"),
        shared_bytes=row.get("shared_bytes"), constexprs=dict(row.get("constexprs") or {}),
        error=str(row.get("error") or ""),
    ) for row in rows]


def compile_in_child(path: Path, shape: Sequence[int], dtype: str, arch: int,
                     timeout_s: float) -> ResourceReport:
    """Run the aot check of `path` in a child process of its own session, at most `timeout_s`."""
    import time

    command = [sys.executable, "-m", "autokernel.aot", "check", str(path),
               "--shape", "x".join(str(int(d)) for d in shape), "--dtype", dtype,
               "--no-execute", "--arch", str(arch), "--json"]
    # Recording runs in the child itself under the interpreter; only the compile spawns again.
    env = dict(os.environ, TRITON_INTERPRET="1")
    started = time.monotonic()
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the child's session: it and its compile phase
        child.communicate()
        return ResourceReport([], error=f"compile took over {timeout_s:g} s; skipped", arch=arch)
    seconds = time.monotonic() - started
    rows = next((line for line in reversed(stdout.splitlines()) if line.startswith("[")), None)
    if rows is None:
        why = _first_line(stderr) or f"exit {child.returncode}, no output"
        return ResourceReport([], error=f"aot check failed: {why}", arch=arch, seconds=seconds)
    launches = launches_from_json(json.loads(rows))
    return ResourceReport(launches, arch=arch, seconds=seconds)


class ResourceProbe:
    """Cached, time-bounded resource usage of kernel sources (see the module docstring)."""

    def __init__(self, cache_dir: str | Path | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, runner: Runner | None = None) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.timeout_s = timeout_s
        self.runner = runner or compile_in_child
        self._memory: dict[str, ResourceReport] = {}

    @staticmethod
    def key(source: str, shape: Sequence[int], dtype: str, arch: int) -> str:
        try:
            import triton

            compiler = triton.__version__
        except ImportError:
            compiler = "?"
        text = json.dumps([source, list(map(int, shape)), dtype, arch, compiler])
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _disk_path(self, key: str) -> Path | None:
        return self.cache_dir / f"{key}.json" if self.cache_dir is not None else None

    def cached(self, source: str, shape: Sequence[int], dtype: str,
               arch: int) -> ResourceReport | None:
        key = self.key(source, shape, dtype, arch)
        if key in self._memory:
            return self._memory[key]
        path = self._disk_path(key)
        if path is not None and path.is_file():
            try:
                data = json.loads(path.read_text())
                report = ResourceReport(launches_from_json(data["launches"]),
                                        error=data.get("error", ""), arch=arch)
            except (OSError, ValueError, KeyError, TypeError):
                return None  # a damaged entry: compile again
            self._memory[key] = report
            return report
        return None

    def report(self, source: str, shape: Sequence[int], dtype: str,
               arch: int) -> ResourceReport:
        """The resource usage of `source`'s launches at `shape`, compiled for `arch` (x10)."""
        found = self.cached(source, shape, dtype, arch)
        if found is not None:
            return found
        from autokernel.harness.static_scan import scan_source, summarize

        refused = scan_source(source)
        if refused:  # compiling runs the file's host code, outside the harness's sandbox
            return ResourceReport([], arch=arch, error="not compiled: the harness's static scan "
                                  f"refuses it ({summarize(refused, 1)})")
        with tempfile.TemporaryDirectory(prefix="autokernel-resources-") as tmp:
            path = Path(tmp) / "kernel.py"
            path.write_text(source)
            try:
                report = self.runner(path, shape, dtype, arch, self.timeout_s)
            except Exception as exc:  # a prompt line, never a crash of the loop
                report = ResourceReport([], error=f"{type(exc).__name__}: {exc}", arch=arch)
        key = self.key(source, shape, dtype, arch)
        self._memory[key] = report
        timed_out = report.error.startswith("compile took over")
        path = self._disk_path(key)
        if path is not None and not timed_out:  # a slow machine may manage it next time
            rows = [{"kernel": r.kernel, "num_warps": r.num_warps, "num_stages": r.num_stages,
                     "grid": r.grid, "n_regs": r.registers, "local_bytes": r.spill_bytes,
                     "shared_bytes": r.shared_bytes, "constexprs": r.constexprs,
                     "error": r.error} for r in report.launches]
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps({"launches": rows, "error": report.error},
                                               default=str) + "\n")
        return report


def resources_enabled() -> bool:
    return os.environ.get(RESOURCES_ENV, "1").strip().lower() not in ("0", "false", "no", "off")

