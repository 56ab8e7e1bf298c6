"""Which programs the candidate may execute: Triton's toolchain, and what running each of them
executes in turn (ELF interpreter, a script's interpreter and named programs)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

EXTRA_EXEC_ENV = "AUTOKERNEL_SANDBOX_EXEC"


def toolchain_executables(device: str = "cuda", *, c_compiler: bool = True) -> list[Path]:
    """The programs Triton runs while compiling for `device`, for `apply_candidate_sandbox`:
    its ptxas and ptxas-blackwell (or the ones TRITON_PTXAS_PATH / TRITON_PTXAS_BLACKWELL_PATH
    name), and, with `c_compiler`, the C compiler that builds a launcher for each new kernel
    signature (`CC`, else gcc, else clang, as `triton.runtime.build` picks it) with the programs
    that compiler runs (cc1, collect2, as, ld). Call before the sandbox: asking the compiler
    where its programs are runs it. ptxas is found without running it (Triton's knobs would)."""
    if device != "cuda":
        return []
    import importlib.util

    spec = importlib.util.find_spec("triton.backends.nvidia")
    found: list[Path] = []
    for tool, variable in (("ptxas", "TRITON_PTXAS_PATH"),
                           ("ptxas-blackwell", "TRITON_PTXAS_BLACKWELL_PATH")):
        candidates = [os.environ.get(variable)]
        if spec is not None and spec.origin is not None:
            candidates.append(str(Path(spec.origin).parent / "bin" / tool))
        for candidate in candidates:
            if candidate and os.access(candidate, os.X_OK):
                found.append(Path(candidate).resolve())
    if c_compiler:
        found += c_compiler_programs()
    return list(dict.fromkeys(found + extra_executables()))


def c_compiler_programs() -> list[Path]:
    """Triton's C compiler and the programs it runs to build a shared library."""
    named = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    compiler = shutil.which(named) if named else None
    if compiler is None:
        return []
    programs = [Path(compiler).resolve()]
    for tool in ("cc1", "collect2", "as", "ld"):
        try:
            answer = subprocess.run([compiler, f"-print-prog-name={tool}"], capture_output=True,
                                    text=True, timeout=60, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        path = answer if os.path.isabs(answer) else shutil.which(answer) if answer else None
        if path and os.access(path, os.X_OK):
            programs.append(Path(path).resolve())
    return programs


def warm_triton_driver(device: str) -> None:
    """Do, before the sandbox, what Triton's CUDA driver does once per process: build its
    `cuda_utils` module and look libcuda up with `/sbin/ldconfig -p`. Both are cached, so the
    sandbox need not allow ldconfig."""
    if device == "cuda":
        from triton.runtime import driver

        driver.active.utils  # noqa: B018  (the first access initialises the driver)


def elf_interpreter(path: Path) -> Path | None:
    """The dynamic loader an ELF executable names (PT_INTERP), or None (static, or not ELF)."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if len(ident) < 64 or ident[:4] != b"\x7fELF":
                return None
            wide, order = ident[4] == 2, "<" if ident[5] == 1 else ">"
            if wide:
                phoff, = struct.unpack_from(order + "Q", ident, 0x20)
                phentsize, phnum = struct.unpack_from(order + "HH", ident, 0x36)
            else:
                phoff, = struct.unpack_from(order + "I", ident, 0x1C)
                phentsize, phnum = struct.unpack_from(order + "HH", ident, 0x2A)
            for index in range(phnum):
                f.seek(phoff + index * phentsize)
                header = f.read(phentsize)
                p_type, = struct.unpack_from(order + "I", header, 0)
                if p_type != 3:  # PT_INTERP
                    continue
                # p_offset, then (past p_vaddr and p_paddr) p_filesz
                offset, size = (struct.unpack_from(order + "Q16xQ", header, 8) if wide
                                else struct.unpack_from(order + "I8xI", header, 4))
                f.seek(offset)
                return Path(f.read(size).rstrip(b"\0").decode())
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def script_programs(path: Path) -> list[Path]:
    """The programs a `#!` script needs to run: its interpreter (for `#!/usr/bin/env NAME`,
    env and NAME as found on PATH), and every executable file it names by absolute path (a
    compiler wrapper's `exec /opt/gcc/libexec/gcc-real "$@"`). Empty for anything but a script."""
    try:
        with open(path, "rb") as f:
            text = f.read(64 * 1024)
    except OSError:
        return []
    if not text.startswith(b"#!"):
        return []
    line, _, body = text[2:].partition(b"\n")
    words = line.decode(errors="replace").split()
    named = words[:1]
    if words and Path(words[0]).name == "env":
        rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        found = shutil.which(rest[0]) if rest else None
        named += [found] if found else []
    named += re.findall(r"(?<![\w.$])(/[\w.+/-]+)", body.decode(errors="replace"))
    programs = []
    for name in named:
        candidate = Path(name)
        if candidate.is_file() and os.access(candidate, os.X_OK):
            programs.append(candidate.resolve())
    return list(dict.fromkeys(programs))


def program_closure(program: Path, depth: int = 3) -> list[Path]:
    """`program` with what executing it executes in turn: its ELF interpreter, or a script's
    interpreter and named programs, followed `depth` levels deep."""
    found = [program]
    interpreter = elf_interpreter(program)
    if interpreter is not None:
        found.append(interpreter)
    elif depth > 0:
        for needed in script_programs(program):
            found += program_closure(needed, depth - 1)
    return list(dict.fromkeys(found))


def extra_executables() -> list[Path]:
    """Programs the user allows besides the toolchain found here (`AUTOKERNEL_SANDBOX_EXEC`, a
    PATH-style list), for a compiler wrapper that runs what no script text names."""
    named = os.environ.get(EXTRA_EXEC_ENV, "")
    return [Path(p).resolve() for p in named.split(os.pathsep) if p]
