"""The seccomp layer: no fork, setsid, ptrace, non-unix sockets, io_uring, metadata changes or
root's privileged syscalls, on every thread."""

from __future__ import annotations

import ctypes
import errno
import os
import socket
from typing import Any

from autokernel.harness.sandbox.layers import SandboxState
from autokernel.harness.sandbox.syscalls import PR_SET_CHILD_SUBREAPER, _raw_syscall

# <linux/sched.h>, <linux/seccomp.h>
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
