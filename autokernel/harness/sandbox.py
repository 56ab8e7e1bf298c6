"""Operating-system confinement of the candidate process, and the sweep that ends its tree.

The static scan reads a candidate's source; this module makes the kernel enforce what the scan
can only hope for. Inside the candidate process, after torch and Triton are imported and CUDA is
initialised but before the candidate is imported, one irreversible call:

    from autokernel.harness import sandbox

    sandbox.warm_triton_driver("cuda")        # Triton's driver runs ldconfig once: do it now
    state = sandbox.apply_candidate_sandbox(
        work_dir, writable=[private_triton_cache], executables=sandbox.toolchain_executables(),
        device="cuda")
    report.notes.extend(state.notes())        # what was applied, and what was not and why

confines the process and everything it later starts, in layers that each degrade on their own:

- `subreaper` (PR_SET_CHILD_SUBREAPER): an orphan anywhere below the candidate is re-parented to
  the candidate, not to init, so while the candidate lives its whole tree hangs below it.
- `no_new_privs` (PR_SET_NO_NEW_PRIVS): nothing it executes gains privileges.
- `no_capabilities`: every capability dropped (effective, permitted, inheritable, ambient, and
  the bounding set where CAP_SETPCAP allows). What it closes is root's: with CAP_SYS_PTRACE a
  root candidate reads any process's /proc memory and environment, the non-dumpable judge's
  included, and with CAP_DAC_OVERRIDE any file.
- `landlock_fs` (Landlock, kernel >= 5.13): reads anywhere; writes (create, delete, rename,
  truncate) only beneath `work_dir` and `writable` (and /dev/null, and the GPU's device files
  for `device="cuda"`); execution only of `executables` and what they need to run (their ELF
  interpreter, ld.so; for a `#!` script, its interpreter and the programs it names).
- `landlock_net` (Landlock ABI >= 4): no TCP bind or connect (and UDP from ABI 10).
- `landlock_signals` (Landlock ABI >= 6): no signal to any process outside the sandbox (the
  judge, the spawner, `kill(-1)`).
- `seccomp` (libseccomp through `pyseccomp`, all threads): no fork: a new task must be a thread,
  or a vfork that execs (how `subprocess` and Triton start ptxas), and with no `executables`
  nothing may be executed at all; no setsid/setpgid (so nothing leaves the process group); no
  ptrace, process_vm_readv/writev or pidfd_getfd; no socket but AF_UNIX (torch.multiprocessing
  needs those); no io_uring (it would bypass all of this); no new namespaces or CLONE_PARENT;
  no chmod/chown/xattr changes (Landlock does not guard metadata); none of root's privileged
  syscalls (modules, mounts, BPF, perf, keyrings, raw I/O); and the subreaper cannot be
  switched off again.

`apply_candidate_sandbox` never raises for a missing feature: it returns a `SandboxState` naming
what was applied and, for everything else, why not, so the harness never runs a candidate less
confined than it reports. `sandbox_capabilities()` answers the same question without applying
anything (for `autokernel doctor`). The optional libraries (`landlockpy`, `pyseccomp`) are
imported lazily.

Triton compiles inside the candidate's first call of each kernel: it runs ptxas, and gcc (cc1,
as, collect2, ld) to build the kernel's launcher; `toolchain_executables()` lists them all. It
writes the results to TRITON_CACHE_DIR, which must therefore be writable, and so is a place the
candidate can plant a compiled launcher (a shared library) or cubin under a predictable key:
give each candidate a cache that no trusted process (the judge, a torch.compile baseline) reads.
If tensors cross to or from the candidate through torch.multiprocessing, its shared memory
lives in /dev/shm: pass that in `writable` too.

Known limits, by design of the kernel features used:
- Landlock needs EXECUTE on the ELF interpreter to run a dynamically linked ptxas, and the
  interpreter will load any readable program (`ld.so /bin/sh`); gcc likewise runs what it is
  told to. Such a process is still inside every layer above (it inherits them: no fork, no
  setsid, no network, no writes outside, killed with the tree), but it is a process. Pass
  `executables=[]` (with Triton's cache already warm, or compiling elsewhere) to forbid
  execution altogether.
- Below Landlock ABI 8 a ruleset binds the calling thread and what it starts later; threads
  started earlier (CUDA's, torch's pools) are not bound. Call this from the thread that will
  import the candidate. seccomp binds every thread.
- Abstract unix sockets stay reachable unless `isolate_abstract_sockets=True` (ABI >= 6), since
  Python 3.12's multiprocessing listens on one.

The spawner's side: `kill_process_tree(root_pid, marker)` freezes (SIGSTOP) and then kills
(SIGKILL) the root, everything below it, everything in its session or process group when it
leads them, and every process whose environment carries `TREE_MARKER_ENV=marker`, so a `setsid`
grandchild is caught whether it was started before the sandbox, or with no sandbox at all:

    marker = new_tree_marker()
    proc = subprocess.Popen(cmd, env={**env, TREE_MARKER_ENV: marker}, start_new_session=True,
                            preexec_fn=become_subreaper, ...)
    wait_unreaped(proc.pid, timeout_s)    # exited or timed out; the root is not reaped yet
    kill_process_tree(proc.pid, marker)   # the root (if alive) and its whole tree
    proc.wait()                           # now reap it

`observed_confinement(pid)` reads the candidate's no_new_privs and seccomp mode from /proc, to
hold its reported state against. Sweep before reaping the root: while its pid is not reaped it
cannot be reused, so matching its session and group is safe. The tree stays whole only while
the root lives (orphans re-parent to it); a grandchild orphaned after the root died is still
found through its session, group or marker.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FEATURES: dict[str, str] = {
    "subreaper": "orphans below the candidate stay in its tree (PR_SET_CHILD_SUBREAPER)",
    "no_new_privs": "nothing it executes gains privileges (PR_SET_NO_NEW_PRIVS)",
    "no_capabilities": "no capability, so a root candidate cannot read the judge's memory "
                       "(capset, PR_CAPBSET_DROP)",
    "landlock_fs": "writes only in its directories, execution only of the toolchain (Landlock)",
    "landlock_net": "no TCP bind or connect (Landlock ABI >= 4)",
    "landlock_signals": "no signals to processes outside the sandbox (Landlock ABI >= 6)",
    "seccomp": "no fork, setsid/setpgid, ptrace, non-unix sockets, io_uring, chmod/chown, "
               "or root's privileged syscalls (seccomp)",
    "tree_sweep": "the spawner can find and kill the candidate's whole process tree (/proc)",
}
CANDIDATE_FEATURES = tuple(name for name in FEATURES if name != "tree_sweep")

TREE_MARKER_ENV = "AUTOKERNEL_SANDBOX_TREE"
EXTRA_EXEC_ENV = "AUTOKERNEL_SANDBOX_EXEC"

LANDLOCK_NET_ABI = 4
LANDLOCK_SCOPE_ABI = 6
LANDLOCK_TSYNC_ABI = 8
LANDLOCK_ABI_LINUX = {1: "5.13", 4: "6.7", 6: "6.12"}

# <linux/prctl.h>, <linux/sched.h>, <linux/seccomp.h>, x86-64/aarch64 syscall numbers of the
# two syscalls probed without a library.
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_GET_DUMPABLE = 3
PR_SET_CHILD_SUBREAPER = 36
CLONE_VFORK = 0x00004000
CLONE_THREAD = 0x00010000
# A new task with any of these fails: CLONE_PARENT (a sibling of the candidate, outside its
# tree), CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (NEWTIME is clone3-only).
CLONE_DENIED_FLAGS = (0x00008000 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000
                      | 0x10000000 | 0x20000000 | 0x40000000)
# Syscalls the candidate never needs, each denied with EPERM. Landlock leaves file metadata
# alone (modes, owners, extended attributes: a root candidate could chmod any root-owned file,
# or give a binary file capabilities), and root's privileged operations (modules, mounts, BPF,
# perf, keyrings, raw I/O) are not Landlock's business either.
SECCOMP_DENIED = (
    "fork", "setsid", "setpgid", "unshare", "setns",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsmount", "fsconfig", "move_mount",
    "open_tree", "mount_setattr", "open_by_handle_at", "bpf", "perf_event_open", "userfaultfd",
    "keyctl", "add_key", "request_key", "iopl", "ioperm", "swapon", "swapoff", "reboot", "acct",
    "mknod", "mknodat",
)
SECCOMP_DENIED_WITHOUT_EXEC = ("vfork", "execve", "execveat")
SECCOMP_GET_ACTION_AVAIL = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SYSCALL_NUMBERS = {  # (seccomp, landlock_create_ruleset)
    "x86_64": (317, 444), "aarch64": (277, 444),
}
LANDLOCK_CREATE_RULESET_VERSION = 1


@dataclass(frozen=True)
class Capability:
    """Whether one feature can be applied on this machine, and the evidence either way."""

    available: bool
    detail: str


@dataclass
class SandboxState:
    """What `apply_candidate_sandbox` did: every feature is in `applied` or in `missing`."""

    applied: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not self.missing

    def notes(self) -> list[str]:
        """One line per feature, for a report's notes."""
        return ([f"sandbox: {name} applied: {detail}" for name, detail in self.applied.items()]
                + [f"sandbox: {name} NOT applied: {why}" for name, why in self.missing.items()])

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "complete": self.complete}


# -- small kernel interfaces -----------------------------------------------------------------------

def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int = 0) -> int:
    """prctl(option, value, 0, 0, 0); raises OSError on failure."""
    prctl = _libc().prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    result = prctl(option, value, 0, 0, 0)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _raw_syscall(name: str, *args: Any) -> tuple[int, int]:
    """(result, errno) of a syscall this module probes without its library."""
    numbers = SYSCALL_NUMBERS.get(os.uname().machine)
    if numbers is None:
        return -1, errno.ENOSYS
    number = numbers[0 if name == "seccomp" else 1]
    syscall = _libc().syscall
    syscall.restype = ctypes.c_long
    result = syscall(ctypes.c_long(number), *args)
    return result, (ctypes.get_errno() if result < 0 else 0)


def landlock_abi() -> tuple[int, str]:
    """(the kernel's Landlock ABI version, or 0; why it is 0)."""
    if not sys.platform.startswith("linux"):
        return 0, f"not Linux ({sys.platform})"
    abi, err = _raw_syscall("landlock", None, ctypes.c_size_t(0),
                            ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    if abi > 0:
        return abi, ""
    if err == errno.EOPNOTSUPP:
        return 0, "Landlock is built in but disabled at boot (add landlock to the lsm= list)"
    return 0, f"no Landlock in kernel {os.uname().release} (needs Linux >= 5.13 built with it)"


def _seccomp_kernel_support() -> tuple[bool, str]:
    action = ctypes.c_uint32(SECCOMP_RET_ALLOW)
    result, err = _raw_syscall("seccomp", ctypes.c_uint(SECCOMP_GET_ACTION_AVAIL),
                               ctypes.c_uint(0), ctypes.byref(action))
    if result == 0:
        return True, ""
    if err == errno.ENOSYS:
        return False, f"kernel {os.uname().release} has no seccomp filters on {os.uname().machine}"
    return False, f"seccomp() refused: {os.strerror(err)} (a container profile may block it)"


def _import_seccomp() -> Any:
    """The `pyseccomp` module; ImportError (with why) when it or libseccomp is missing."""
    import ctypes.util

    if ctypes.util.find_library("seccomp") is None:
        raise ImportError("libseccomp.so.2 not found (Debian/Ubuntu package libseccomp2)")
    try:
        import pyseccomp
    except ImportError as exc:
        raise ImportError(f"pyseccomp not importable ({exc})") from None
    except (OSError, RuntimeError) as exc:  # pyseccomp loads libseccomp at import time
        raise ImportError(f"pyseccomp could not load libseccomp ({exc})") from None
    return pyseccomp


def _import_landlock() -> Any:
    try:
        import landlockpy
    except ImportError as exc:
        raise ImportError(f"landlockpy not importable ({exc})") from None
    return landlockpy


# -- capabilities ----------------------------------------------------------------------------------

def sandbox_capabilities() -> dict[str, Capability]:
    """Which features `apply_candidate_sandbox` could apply here, and why not; applies nothing."""
    if not sys.platform.startswith("linux"):
        return {name: Capability(False, f"not Linux ({sys.platform})") for name in FEATURES}
    caps = {
        "subreaper": Capability(True, "prctl(PR_SET_CHILD_SUBREAPER)"),
        "no_new_privs": Capability(True, "prctl(PR_SET_NO_NEW_PRIVS)"),
        "no_capabilities": Capability(True, f"capset; holds now: {_effective_capabilities()}"),
    }
    abi, why = landlock_abi()
    try:
        library = _import_landlock()
        library_version = f"landlockpy {library.__version__}"
    except ImportError as exc:
        library_version, library_error = "", str(exc)
    linux = f"kernel {os.uname().release}"
    for name, needs in (("landlock_fs", 1), ("landlock_net", LANDLOCK_NET_ABI),
                        ("landlock_signals", LANDLOCK_SCOPE_ABI)):
        if abi == 0:
            caps[name] = Capability(False, why)
        elif abi < needs:
            caps[name] = Capability(False, f"Landlock ABI {abi} in {linux}; needs ABI {needs} "
                                           f"(Linux {LANDLOCK_ABI_LINUX[needs]})")
        elif not library_version:
            caps[name] = Capability(False, f"{library_error}; the kernel offers Landlock ABI {abi}")
        else:
            detail = f"Landlock ABI {abi} ({linux}), {library_version}"
            if name == "landlock_fs" and abi < LANDLOCK_TSYNC_ABI:
                detail += (f"; binds the calling thread and what it starts (every thread needs "
                           f"ABI {LANDLOCK_TSYNC_ABI})")
            caps[name] = Capability(True, detail)
    supported, why = _seccomp_kernel_support()
    if not supported:
        caps["seccomp"] = Capability(False, why)
    else:
        try:
            library = _import_seccomp()
            caps["seccomp"] = Capability(True, f"libseccomp API level {library.get_api()}, "
                                               f"pyseccomp {library.__version__}, all threads")
        except ImportError as exc:
            caps["seccomp"] = Capability(False, str(exc))
    readable = os.path.isdir("/proc/self/task") and os.access("/proc/1/stat", os.R_OK)
    caps["tree_sweep"] = Capability(readable, "/proc lists every process" if readable else
                                    "/proc is not mounted or hides processes")
    return caps


# -- applying the sandbox --------------------------------------------------------------------------

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


def _is_script(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


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


def _device_files(device: str) -> list[Path]:
    """Device files a GPU runtime opens read-write after initialisation."""
    if device != "cuda":
        return []
    patterns = ("/dev/nvidia*", "/dev/dri", "/dev/kfd")
    return list(dict.fromkeys(Path(p) for pattern in patterns for p in sorted(glob.glob(pattern))))


def hide_from_candidates() -> bool:
    """Make the calling process (a judge: the harness, the fork server) non-dumpable, so that a
    candidate of the same user cannot read its /proc entries (environ, with the user's API keys;
    mem; maps): the kernel then asks for CAP_SYS_PTRACE, which only root has. Also means no core
    dumps of this process. Reset by exec, and to be undone in a forked child that must read its
    own /proc entries (`show_to_self`). False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        _prctl(PR_SET_DUMPABLE, 0)
        return True
    except OSError:
        return False


def show_to_self() -> None:
    """Dumpable again (a worker forked from a hidden judge reads its own /proc files)."""
    if sys.platform.startswith("linux"):
        try:
            _prctl(PR_SET_DUMPABLE, 1)
        except OSError:
            pass


def is_dumpable() -> bool:
    return not sys.platform.startswith("linux") or _prctl(PR_GET_DUMPABLE) == 1


def _effective_capabilities() -> str:
    """CapEff of this process, as /proc shows it (hex)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return line.split()[1]
    except OSError:
        pass
    return "unknown"


def drop_capabilities() -> str:
    """Give up every capability this process holds, for good; says what it held. Raises
    OSError when capset fails."""
    held = _effective_capabilities()
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = 40
    dropped_bounding = True
    for cap in range(last + 1):
        try:
            _prctl(PR_CAPBSET_DROP, cap)
        except OSError:  # EPERM without CAP_SETPCAP: no_new_privs keeps exec from using it
            dropped_bounding = False
            break
    try:
        _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass  # kernels before 4.3 have no ambient set
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable}, all zero
    capset = _libc().capset
    if capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    now = _effective_capabilities()
    if now not in ("0000000000000000", "unknown"):
        raise OSError(errno.EPERM, f"capabilities {now} still effective")
    return (f"held {held}, now none" + ("" if dropped_bounding else
                                         "; bounding set kept (no CAP_SETPCAP)"))


def become_subreaper() -> bool:
    """Make this process the reaper of every orphan below it (usable as a Popen preexec_fn; the
    setting survives exec). False where the kernel has no such feature."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        return True
    except OSError:
        return False


def _apply_landlock(landlock: Any, abi: int, state: SandboxState, work_dir: Path,
                    writable: list[Path], executables: list[Path], device: str,
                    isolate_abstract_sockets: bool) -> None:
    access = landlock.AccessFS
    file_rights = access.READ_FILE | access.WRITE_FILE | access.TRUNCATE | access.IOCTL_DEV
    # Never device nodes: root with CAP_MKNOD could make one for a disk and write to it.
    tree_rights = landlock.fs_for_abi(abi) & ~(
        access.EXECUTE | access.MAKE_CHAR | access.MAKE_BLOCK)
    scope = landlock.Scope.SIGNAL
    if isolate_abstract_sockets:
        scope |= landlock.Scope.ABSTRACT_UNIX_SOCKET
    threads_before = len(os.listdir("/proc/self/task"))
    with landlock.Ruleset(scoped=scope) as ruleset:
        # Reads anywhere, and (ABI >= 9) connecting to any named unix socket, as below ABI 9:
        # torch.multiprocessing connects to the sender's socket, wherever its TMPDIR is.
        ruleset.allow_path("/", access.READ_FILE | access.READ_DIR | access.RESOLVE_UNIX)
        if os.path.isdir("/dev"):
            ruleset.allow_path("/dev", access.IOCTL_DEV)
        written = []
        for path in [work_dir, *writable]:
            if not path.exists():
                path.mkdir(parents=True)
            ruleset.allow_path(path, tree_rights if path.is_dir() else file_rights)
            written.append(str(path))
        for path in [Path("/dev/null"), *_device_files(device)]:
            ruleset.allow_path(path, file_rights)  # existing device files: no new nodes
            written.append(str(path))
        programs, skipped = [], []
        for program in executables:
            for path in program_closure(program):
                if os.access(path, os.X_OK) and not path.is_dir():
                    ruleset.allow_path(path, access.EXECUTE | access.READ_FILE)
                    programs.append(path.name)
                else:
                    skipped.append(str(path))
        tsync = abi >= LANDLOCK_TSYNC_ABI
        ruleset.restrict(landlock.RestrictFlag.TSYNC if tsync else landlock.RestrictFlag.NONE)
        handled_net, scoped = ruleset.handled_net, ruleset.scoped
    older = threads_before - 1
    threads = ("every thread" if tsync or older == 0 else
               f"this thread and what it starts ({older} older threads unbound: binding every "
               f"thread needs ABI {LANDLOCK_TSYNC_ABI})")
    execution = (f"execution only of {', '.join(dict.fromkeys(programs))}" if programs
                 else "no execution")
    if skipped:
        execution += f" (not executable, left out: {', '.join(skipped)})"
    state.applied["landlock_fs"] = (f"ABI {abi}, {threads}; writes only beneath "
                                    f"{', '.join(written)}; {execution}")
    if handled_net:
        state.applied["landlock_net"] = f"denied: {handled_net!r}"
    else:
        state.missing["landlock_net"] = (f"Landlock ABI {abi} has no network rules (needs ABI "
                                         f"{LANDLOCK_NET_ABI}, Linux {LANDLOCK_ABI_LINUX[4]})")
    if scoped & landlock.Scope.SIGNAL:
        state.applied["landlock_signals"] = f"scoped: {scoped!r}"
    else:
        state.missing["landlock_signals"] = (f"Landlock ABI {abi} has no scopes (needs ABI "
                                             f"{LANDLOCK_SCOPE_ABI}, Linux "
                                             f"{LANDLOCK_ABI_LINUX[6]})")


def _apply_seccomp(seccomp: Any, state: SandboxState, may_execute: bool) -> None:
    eperm = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    rules.set_attr(seccomp.Attr.CTL_TSYNC, 1)  # every thread, not only this one

    def arg(index: int, op: str, value: int, mask: int | None = None) -> Any:
        if op == "masked_eq":
            return seccomp.Arg(index, seccomp.MASKED_EQ, mask, value)
        return seccomp.Arg(index, getattr(seccomp, op.upper()), value)

    # A new task may be a thread, or (when execution is allowed) a vfork child that execs: a
    # process that keeps running the candidate's Python is never possible.
    new_task = CLONE_THREAD | (CLONE_VFORK if may_execute else 0)
    rules.add_rule(eperm, "clone", arg(0, "masked_eq", 0, new_task))
    for flag in range(32):
        if CLONE_DENIED_FLAGS & (1 << flag):
            rules.add_rule(eperm, "clone", arg(0, "masked_eq", 1 << flag, 1 << flag))
    # clone3 passes its flags in memory, where seccomp cannot look: ENOSYS makes glibc fall back
    # to clone.
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    denied, unknown = [], []
    for name in SECCOMP_DENIED + (() if may_execute else SECCOMP_DENIED_WITHOUT_EXEC):
        try:
            rules.add_rule(eperm, name)
            denied.append(name)
        except (OSError, ValueError):  # a syscall this libseccomp does not know
            unknown.append(name)
    for name in ("socket", "socketpair"):
        rules.add_rule(eperm, name, arg(0, "ne", socket.AF_UNIX))
    rules.add_rule(eperm, "prctl", arg(0, "eq", PR_SET_CHILD_SUBREAPER))
    # kill(-1, ...) signals every process the caller may signal (all of them, for root).
    rules.add_rule(eperm, "kill", arg(0, "masked_eq", 0xFFFFFFFF, 0xFFFFFFFF))
    rules.load()
    forks = "threads and vfork+exec only" if may_execute else "threads only, no exec"
    state.applied["seccomp"] = (f"all threads: {forks}; denied: {', '.join(denied)}, "
                                "non-AF_UNIX sockets, CLONE_PARENT, new namespaces, kill(-1), "
                                "unsetting the subreaper"
                                + (f"; unknown to libseccomp: {', '.join(unknown)}"
                                   if unknown else ""))


def apply_candidate_sandbox(work_dir: Path, writable: Iterable[Path],
                            executables: Iterable[Path], device: str, *,
                            isolate_abstract_sockets: bool = False) -> SandboxState:
    """Confine this process and everything it will start; irreversible. See the module
    docstring for each layer. `writable` directories are created if missing; each executable's
    ELF interpreter is allowed with it. Call from the thread that will import the candidate,
    after torch/Triton are imported and CUDA is initialised. Never raises for a missing
    feature: the returned state says what was applied and why the rest was not."""
    state = SandboxState()
    if not sys.platform.startswith("linux"):
        for name in CANDIDATE_FEATURES:
            state.missing[name] = f"not Linux ({sys.platform})"
        return state
    work_dir = Path(work_dir).resolve()
    writable = [Path(p).resolve() for p in writable]
    executables = [Path(p).resolve() for p in executables]
    # Both libraries are loaded before anything is restricted: finding libseccomp runs ldconfig.
    try:
        seccomp: Any = _import_seccomp()
        supported, why = _seccomp_kernel_support()
        if not supported:
            seccomp, seccomp_error = None, why
    except ImportError as exc:
        seccomp, seccomp_error = None, str(exc)
    abi, landlock_error = landlock_abi()
    landlock: Any = None
    if abi:
        try:
            landlock = _import_landlock()
        except ImportError as exc:
            landlock_error = f"{exc}; the kernel offers Landlock ABI {abi}"

    if become_subreaper():
        state.applied["subreaper"] = "orphans below this process are re-parented to it"
    else:
        state.missing["subreaper"] = "prctl(PR_SET_CHILD_SUBREAPER) failed"
    try:
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        state.applied["no_new_privs"] = "set"
    except OSError as exc:
        state.missing["no_new_privs"] = f"prctl failed: {exc}"

    try:
        state.applied["no_capabilities"] = drop_capabilities()
    except OSError as exc:
        state.missing["no_capabilities"] = f"capset failed: {exc}"

    if landlock is None:
        for name in ("landlock_fs", "landlock_net", "landlock_signals"):
            state.missing[name] = landlock_error
    else:
        try:
            _apply_landlock(landlock, abi, state, work_dir, writable, executables, device,
                            isolate_abstract_sockets)
        except Exception as exc:  # a failed layer is reported, never fatal
            for name in ("landlock_fs", "landlock_net", "landlock_signals"):
                state.missing[name] = f"Landlock failed: {type(exc).__name__}: {exc}"

    if seccomp is None:
        state.missing["seccomp"] = seccomp_error
    else:
        try:
            _apply_seccomp(seccomp, state, may_execute=bool(executables))
        except Exception as exc:
            state.missing["seccomp"] = f"seccomp failed: {type(exc).__name__}: {exc}"
    return state


def observed_confinement(pid: int) -> dict[str, str]:
    """What /proc shows, from outside, of a process's confinement: `no_new_privs` ("1" when
    set), `seccomp` ("2" in filter mode) and `seccomp_filters` (how many). A judge can hold a
    candidate's reported `SandboxState` against this; Landlock is not visible here."""
    wanted = {"NoNewPrivs": "no_new_privs", "Seccomp": "seccomp",
              "Seccomp_filters": "seccomp_filters"}
    seen = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in wanted:
                    seen[wanted[key]] = value.strip()
    except OSError:
        pass
    return seen


# -- the spawner's side: ending the whole tree -----------------------------------------------------

def new_tree_marker() -> str:
    """A secret value for TREE_MARKER_ENV in one candidate's environment."""
    return secrets.token_hex(16)


@dataclass(frozen=True)
class _Proc:
    ppid: int
    pgid: int
    sid: int


def _process_table() -> dict[int, _Proc]:
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: fields resume after the last ')'.
        fields = stat[stat.rfind(b")") + 2:].split()
        table[int(entry.name)] = _Proc(int(fields[1]), int(fields[2]), int(fields[3]))
    return table


def _carries_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def _ancestors(pid: int, table: dict[int, _Proc]) -> set[int]:
    seen = set()
    while pid in table and pid not in seen:
        seen.add(pid)
        pid = table[pid].ppid
    return seen


def tree_members(root_pid: int, marker: str | None = None) -> set[int]:
    """Live (or zombie) processes of the tree rooted at `root_pid`: the root, its descendants,
    its session and process group when it leads them (or when it is gone), every carrier of
    `marker`, and their descendants. Never the caller or the caller's ancestors."""
    table = _process_table()
    root = table.get(root_pid)
    members = {root_pid} if root is not None else set()
    for pid, proc in table.items():
        if ((root is None or root.sid == root_pid) and proc.sid == root_pid) or \
                ((root is None or root.pgid == root_pid) and proc.pgid == root_pid):
            members.add(pid)
    if marker:
        tag = f"{TREE_MARKER_ENV}={marker}".encode()
        members |= {pid for pid in table if pid not in members and _carries_marker(pid, tag)}
    children: dict[int, list[int]] = {}
    for pid, proc in table.items():
        children.setdefault(proc.ppid, []).append(pid)
    pending = list(members)
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in members:
                members.add(child)
                pending.append(child)
    return members - _ancestors(os.getpid(), table)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def wait_unreaped(pid: int, timeout_s: float | None = None) -> bool:
    """Wait until this process's child `pid` has exited (True) or `timeout_s` has passed
    (False), without reaping it: its pid stays reserved, so `kill_process_tree` can still match
    the session and group it led. Popen.wait() reaps it afterwards as usual."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pause = 0.001
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:  # already reaped, or not our child
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def kill_process_tree(root_pid: int, marker: str | None = None, *, rounds: int = 50,
                      reap_timeout_s: float = 5.0) -> set[int]:
    """SIGKILL every process of the tree (`tree_members`), returning their pids.

    The tree is frozen first: members are stopped (SIGSTOP) and the table re-read until no new
    member appears, so a process forking while the sweep runs cannot leave a child behind. Then
    all are killed at once. Killed processes that are this process's children (orphans re-parented
    to a subreaper spawner) are reaped, except the root: its owner (a Popen) reaps it."""
    stopped: set[int] = set()
    for _ in range(rounds):
        fresh = tree_members(root_pid, marker) - stopped
        if not fresh:
            break
        for pid in fresh:
            _signal(pid, signal.SIGSTOP)
        stopped |= fresh
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + reap_timeout_s
    orphans = stopped - {root_pid}
    while orphans and time.monotonic() < deadline:
        for pid in list(orphans):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not ours to reap
                orphans.discard(pid)
                continue
            if done:
                orphans.discard(pid)
        if orphans:
            time.sleep(0.01)
    return stopped
