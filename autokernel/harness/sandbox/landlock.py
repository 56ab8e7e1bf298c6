"""The Landlock layers: writes only in the candidate's directories, execution only of the
toolchain, no TCP, no signals outside the sandbox."""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import sys
from pathlib import Path
from typing import Any

from autokernel.harness.sandbox.executables import program_closure
from autokernel.harness.sandbox.layers import SandboxState
from autokernel.harness.sandbox.syscalls import _raw_syscall

LANDLOCK_NET_ABI = 4
LANDLOCK_SCOPE_ABI = 6
LANDLOCK_TSYNC_ABI = 8
LANDLOCK_ABI_LINUX = {1: "5.13", 4: "6.7", 6: "6.12"}
LANDLOCK_CREATE_RULESET_VERSION = 1


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


def _import_landlock() -> Any:
    try:
        import landlockpy
    except ImportError as exc:
        raise ImportError(f"landlockpy not importable ({exc})") from None
    return landlockpy


def _device_files(device: str) -> list[Path]:
    """Device files a GPU runtime opens read-write after initialisation."""
    if device != "cuda":
        return []
    patterns = ("/dev/nvidia*", "/dev/dri", "/dev/kfd")
    return list(dict.fromkeys(Path(p) for pattern in patterns for p in sorted(glob.glob(pattern))))


def _apply_landlock(landlock: Any, abi: int, state: SandboxState, work_dir: Path,
                    writable: list[Path], executables: list[Path], device: str,
                    isolate_abstract_sockets: bool, readable: list[Path] | None = None) -> None:
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
        # Reads only of `readable` (None: anywhere), and (ABI >= 9) connecting to any named unix
        # socket, as below ABI 9: torch.multiprocessing connects to the sender's socket.
        read = access.READ_FILE | access.READ_DIR
        if readable is None:
            ruleset.allow_path("/", read | access.RESOLVE_UNIX)
        else:
            if abi >= 9:
                ruleset.allow_path("/", access.RESOLVE_UNIX)
            for path in readable:
                if path.exists():
                    ruleset.allow_path(path, read if path.is_dir() else access.READ_FILE)
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
    reads = "reads anywhere" if readable is None else \
        f"reads only beneath {len(readable)} paths (installs, its directory, /dev, /proc/self)"
    state.applied["landlock_fs"] = (f"ABI {abi}, {threads}; {reads}; writes only beneath "
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
