"""Triton's C compiler inside the sandbox: the real compiler behind a one-line wrapper script,
and the probe that a sandboxed process can still build a launcher."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from autokernel.harness.sandbox.executables import EXTRA_EXEC_ENV


def unwrapped_c_compiler() -> tuple[str, dict[str, str]] | None:
    """The real compiler behind a C compiler that is a one-line wrapper script (`CC`, or gcc on
    PATH, as Triton picks it): `exec PROGRAM [-B DIR | -isystem DIR]... "$@"` gives PROGRAM,
    and the environment that stands for its flags (COMPILER_PATH and LIBRARY_PATH for -B,
    C_INCLUDE_PATH for -isystem), provided PROGRAM is no script and builds a shared library that
    way. With it as CC, the sandbox need not let the candidate run the wrapper's shell. None
    when the compiler is no such script, or the unwrapped one does not work."""
    named = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    compiler = shutil.which(named) if named else None
    if compiler is None or not _is_script(Path(compiler)):
        return None
    try:
        body = Path(compiler).read_text(errors="replace").splitlines()[1:]
        lines = [line.strip() for line in body if line.strip() and not line.strip().startswith("#")]
        words = shlex.split(lines[0]) if len(lines) == 1 else []
    except (OSError, ValueError):
        return None
    if len(words) < 3 or words[0] != "exec" or words[-1] != "$@":
        return None
    real, flags = shutil.which(words[1]), words[2:-1]
    if real is None or _is_script(Path(real)):
        return None
    paths: dict[str, list[str]] = {"COMPILER_PATH": [], "LIBRARY_PATH": [], "C_INCLUDE_PATH": []}
    at = 0
    while at < len(flags):
        flag = flags[at]
        if flag.startswith("-B") or flag == "-isystem":
            value = flag[2:] if flag.startswith("-B") and len(flag) > 2 else (
                flags[at + 1] if at + 1 < len(flags) else "")
            at += 1 if flag.startswith("-B") and len(flag) > 2 else 2
            names = ("COMPILER_PATH", "LIBRARY_PATH") if flag.startswith("-B") \
                else ("C_INCLUDE_PATH",)
            for name in names:
                paths[name].append(value)
        else:
            return None  # a flag no environment variable stands for
    env = {name: os.pathsep.join([*dirs, *filter(None, [os.environ.get(name)])])
           for name, dirs in paths.items() if dirs}
    import tempfile

    with tempfile.TemporaryDirectory(prefix="autokernel-cc-") as scratch:
        source, library = Path(scratch) / "probe.c", Path(scratch) / "probe.so"
        source.write_text("#include <stddef.h>\n#include <stdint.h>\n" + PROBE_SOURCE)
        try:
            built = subprocess.run([real, "-shared", "-fPIC", "-o", str(library), str(source)],
                                   capture_output=True, timeout=120, check=False,
                                   env={**os.environ, **env})
        except (OSError, subprocess.SubprocessError):
            return None
        return (real, env) if built.returncode == 0 and library.is_file() else None


@functools.cache
def toolchain_reads() -> tuple[Path, ...]:
    """What Triton's C compiler reads when it builds a launcher: the install prefix of each
    compiler it may run (`CC` or gcc/clang on PATH, and the real one behind a wrapper script)
    and every directory the compiler searches for programs and libraries (libgcc, crt files,
    `as`, `collect2`). A compiler outside /usr (`/opt/gcc` on a GPU machine) needs them, or its
    linker finds no `-lgcc` inside the sandbox."""
    named = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    compilers = {shutil.which(named)} if named else set()
    unwrapped = unwrapped_c_compiler()
    if unwrapped is not None:
        compilers.add(unwrapped[0])
    found: set[Path] = set()
    for compiler in filter(None, compilers):
        program = Path(compiler).resolve()
        if program.parent.name == "bin":
            found.add(program.parent.parent)
        env = {**os.environ, **(unwrapped[1] if unwrapped else {})}
        try:
            listed = subprocess.run([compiler, "-print-search-dirs"], capture_output=True,
                                    text=True, timeout=60, check=False, env=env).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in listed.splitlines():
            key, _, value = line.partition(": ")
            if key in ("install", "programs", "libraries"):
                found.update(Path(d).resolve() for d in value.lstrip("=").split(os.pathsep)
                             if d and Path(d).is_dir())
    return tuple(sorted(found))


def _is_script(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


PROBE_SOURCE = "int autokernel_toolchain_probe(void) { return 42; }\n"


def toolchain_probe(work_dir: Path) -> str | None:
    """Run the C compiler Triton would (as `triton.runtime.build` picks it) on a trivial file
    in `work_dir`, from inside the sandbox; None when it built a shared library, else why not.
    A candidate's first launch needs exactly this, so a sandbox that forbids it is an
    environment error to report once, not a crash to blame on every candidate."""
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        return "no C compiler found (set CC): Triton builds each kernel's launcher with one"
    source, library = work_dir / "toolchain_probe.c", work_dir / "toolchain_probe.so"
    try:
        source.write_text(PROBE_SOURCE)
        # Its temporary files go where the sandbox lets it write, as the worker's TMPDIR does.
        done = subprocess.run([compiler, str(source), "-O0", "-shared", "-fPIC", "-o",
                               str(library)], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "TMPDIR": str(work_dir)}, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{compiler}: {type(exc).__name__}: {exc}"
    finally:
        source.unlink(missing_ok=True)
    built = library.exists()
    library.unlink(missing_ok=True)
    if done.returncode != 0 or not built:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return f"{compiler} exited with status {done.returncode}: {' / '.join(tail)}"
    return None


_PROBE_CHILD = """
import json, sys
from pathlib import Path
from autokernel.harness import sandbox
work = Path(sys.argv[1])
state = sandbox.apply_candidate_sandbox(work, [], sandbox.toolchain_executables("cuda"), "cpu")
print(json.dumps({"blocked": sandbox.toolchain_probe(work), "applied": sorted(state.applied)}))
"""


def toolchain_check() -> tuple[bool, str]:
    """Whether Triton's C compiler still runs inside the sandbox, tried in a throwaway child
    process (the sandbox is irreversible); for `autokernel doctor`."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory(prefix="autokernel-toolchain-") as work:
        try:
            done = subprocess.run([sys.executable, "-c", _PROBE_CHILD, work], capture_output=True,
                                  text=True, timeout=300, check=False)
            answer = json.loads(done.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
            return False, f"the probe process failed: {type(exc).__name__}: {exc}"
    if answer["blocked"] is not None:
        return False, (f"{answer['blocked']}; name the programs your compiler runs in "
                       f"{EXTRA_EXEC_ENV}")
    layers = ", ".join(answer["applied"]) or "no layer"
    return True, f"the C compiler builds a shared library inside ({layers})"
