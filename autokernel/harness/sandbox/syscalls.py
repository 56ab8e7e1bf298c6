"""The few raw kernel interfaces the sandbox layers call without a library: prctl and two
syscalls probed by number."""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Any

# <linux/prctl.h>, <linux/capability.h>
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_GET_DUMPABLE = 3
PR_SET_CHILD_SUBREAPER = 36
# x86-64/aarch64 numbers of the two syscalls probed without a library.
SYSCALL_NUMBERS = {  # (seccomp, landlock_create_ruleset)
    "x86_64": (317, 444), "aarch64": (277, 444),
}


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
