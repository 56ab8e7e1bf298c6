"""Compile a CUDA kernel file's C++ source with nvcc into a shared library, content-cached.

Why nvcc + ctypes and not `torch.utils.cpp_extension.load_inline`: load_inline needs CUDA_HOME
and ninja, compiles torch's whole C++ API into every module (tens of seconds per build, where
nvcc on a small `.cu` takes 2-5 s), and binds through pybind11, which ties the library to the
exact torch build. A plain `extern "C"` launcher taking raw pointers, sizes, strides and the
stream as integers needs only nvcc and the CUDA headers, so the same build runs on a machine
without a GPU (CI and `python -m autokernel.aot check` compile for sm_90a there) and its cache
key is just source + defines + arch + nvcc version.

The cache lives under `<cache dir>/cuda/<key[:2]>/<key>.so` (with `<key>.log`, ptxas's resource
report): a revert or a repeated configuration finds its library and never rebuilds. The library
is written under a temporary name and renamed into place, so concurrent builds of one key are
safe and a killed build leaves no torn library.

The library links the CUDA runtime statically (nvcc's default): it shares the GPU's primary
context with torch, takes torch's current stream as a `cudaStream_t`, and needs no libcudart on
the loader's path.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from autokernel.files import atomic_write_text
from autokernel.text import bounded_text

NVCC_ENV = "AUTOKERNEL_NVCC"
BUILD_TIMEOUT_S = 300
DETAIL_CHARS = 6000
FIRST_ERROR_LINES = 8
HOPPER_ARCH = "sm_90a"  # wgmma and TMA need the arch-specific target, not plain sm_90

# Appended to every source: the runtime names a launcher's failure by CUDA's own message, and
# the harness starts the library's (static) CUDA runtime on torch's primary context before the
# candidate's OS sandbox, rather than at its first launch inside it.
ERROR_STRING_SUFFIX = """
extern "C" const char* autokernel_error_string(int code) {
    return cudaGetErrorString(static_cast<cudaError_t>(code));
}
extern "C" int autokernel_runtime_init(void) {
    return static_cast<int>(cudaFree(0));
}
"""
NVCC_FLAGS = ("-shared", "-Xcompiler", "-fPIC", "-O3", "-std=c++17", "-lineinfo",
              "-Xptxas", "-v")  # nvcc includes cuda_runtime.h in every .cu itself


class CudaBuildError(RuntimeError):
    """nvcc refused the source: `str()` is the first error lines, `detail` the whole log."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


@dataclass(frozen=True)
class BuildResult:
    library: Path
    key: str
    arch: str
    seconds: float  # nvcc's wall time; 0.0 for a cache hit
    cached: bool
    ptxas_log: str  # `-Xptxas -v` output: registers, spills, shared memory per kernel


def find_nvcc() -> str | None:
    """nvcc from AUTOKERNEL_NVCC, PATH, CUDA_HOME or /usr/local/cuda, or None."""
    candidates = [os.environ.get(NVCC_ENV), shutil.which("nvcc")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(str(Path(home) / "bin" / "nvcc"))
    return next((c for c in candidates if c and Path(c).is_file()), None)


@functools.cache
def nvcc_version(nvcc: str) -> str:
    """nvcc's release line ("Cuda compilation tools, release 13.0, V13.0.88"): part of the key."""
    output = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    lines = [line for line in output.stdout.splitlines() if "release" in line]
    return lines[-1].strip() if lines else output.stdout.strip()


def arch_for_capability(major: int, minor: int) -> str:
    """The real target of a GPU: sm_90a on Hopper (and sm_100a on Blackwell), where the
    arch-specific features live; sm_80 on Ampere, sm_89 on Ada."""
    return f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"


def current_arch() -> str:
    """The current CUDA device's target (see arch_for_capability)."""
    import torch

    return arch_for_capability(*torch.cuda.get_device_capability())


def gencode_flags(arch: str) -> list[str]:
    """`-gencode` for exactly `arch` (the `-arch=sm_90a` shorthand also runs a plain sm_90 pass
    that rejects wgmma)."""
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise ValueError(f"not an nvcc target: {arch!r} (e.g. sm_90a, sm_80, sm_89)")
    return [f"-gencode=arch=compute_{arch[3:]},code={arch}"]


def build_key(source: str, defines: dict[str, str], arch: str, version: str) -> str:
    payload = json.dumps({"source": source, "defines": sorted(defines.items()), "arch": arch,
                          "nvcc": version, "flags": NVCC_FLAGS, "suffix": ERROR_STRING_SUFFIX})
    return hashlib.sha256(payload.encode()).hexdigest()


def default_cache_dir() -> Path:
    from autokernel.backends.interface import cache_dir

    return cache_dir()


def first_error_lines(log: str, source_name: str = "CUDA_SOURCE") -> str:
    """nvcc's first error lines, each `<source_name> line N: message` (paths dropped)."""
    lines = []
    for line in log.splitlines():
        match = re.match(r"^.*?\.cu\((\d+)\): (.*)$", line)
        if match:
            line = f"{source_name} line {match.group(1)}: {match.group(2)}"
        if "error" in line.lower() or (lines and len(lines) < FIRST_ERROR_LINES and line.strip()):
            lines.append(line.strip())
        if len(lines) >= FIRST_ERROR_LINES:
            break
    return "\n".join(lines) or bounded_text(log.strip(), 1200) or "nvcc failed without output"


def build_extension(source: str, defines: dict[str, str] | None = None, *,
                    arch: str | None = None, cache_dir: str | Path | None = None,
                    nvcc: str | None = None, source_name: str = "CUDA_SOURCE",
                    timeout_s: float = BUILD_TIMEOUT_S) -> BuildResult:
    """The shared library of `source` compiled with `-D` `defines` for `arch` (default: the
    current GPU's), from the cache when it was built before. Raises CudaBuildError."""
    defines = dict(defines or {})
    for name in defines:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise CudaBuildError(f"not a macro name: {name!r}")
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise CudaBuildError(f"nvcc not found (set {NVCC_ENV}, CUDA_HOME or PATH)")
    arch = arch or current_arch()
    key = build_key(source, defines, arch, nvcc_version(nvcc))
    folder = Path(cache_dir or default_cache_dir()) / "cuda" / key[:2]
    library, log_path = folder / f"{key}.so", folder / f"{key}.log"
    if library.is_file():
        log = log_path.read_text() if log_path.is_file() else ""
        return BuildResult(library, key, arch, 0.0, True, log)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="autokernel-nvcc-") as scratch:
        source_path = Path(scratch) / "kernel.cu"
        source_path.write_text(source + "\n" + ERROR_STRING_SUFFIX, encoding="utf-8")
        output = Path(scratch) / "kernel.so"
        command = [nvcc, *NVCC_FLAGS, *gencode_flags(arch),
                   *(f"-D{name}={value}" for name, value in sorted(defines.items())),
                   "-o", str(output), str(source_path)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                  cwd=scratch)
        except subprocess.TimeoutExpired as exc:
            raise CudaBuildError(f"nvcc ran past {timeout_s:g} s") from exc
        log = (done.stdout + done.stderr).replace(str(source_path), f"{source_name}.cu")
        if done.returncode != 0 or not output.is_file():
            raise CudaBuildError(first_error_lines(log, source_name),
                                 bounded_text(log, DETAIL_CHARS))
        seconds = time.perf_counter() - started
        atomic_write_text(log_path, log, durable=False)
        staged = folder / f".{key}.{os.getpid()}.tmp"
        shutil.copyfile(output, staged)
        os.replace(staged, library)
    return BuildResult(library, key, arch, round(seconds, 3), False, log)
