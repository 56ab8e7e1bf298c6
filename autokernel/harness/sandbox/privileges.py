"""The process-attribute layers (prctl, capset): the subreaper, no capabilities, and hiding a
judge's /proc entries from candidates (non-dumpable)."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from pathlib import Path

from autokernel.harness.sandbox.syscalls import (
    LINUX_CAPABILITY_VERSION_3, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, PR_CAPBSET_DROP,
    PR_GET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE, _libc, _prctl,
)

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
