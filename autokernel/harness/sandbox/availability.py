"""Which layers this machine can apply, and why not, without applying any (`autokernel doctor`)."""

from __future__ import annotations

import os
import sys

from autokernel.harness.sandbox.landlock import (
    LANDLOCK_ABI_LINUX, LANDLOCK_NET_ABI, LANDLOCK_SCOPE_ABI, LANDLOCK_TSYNC_ABI, _import_landlock,
    landlock_abi,
)
from autokernel.harness.sandbox.layers import FEATURES, Capability
from autokernel.harness.sandbox.privileges import _effective_capabilities
from autokernel.harness.sandbox.seccomp import _import_seccomp, _seccomp_kernel_support


def sandbox_capabilities() -> dict[str, Capability]:
    """Which features `apply_candidate_sandbox` could apply here, and why not; applies nothing."""
    if not sys.platform.startswith("linux"):
        return {name: Capability(False, f"not Linux ({sys.platform})") for name in FEATURES}
    caps = {
        "subreaper": Capability(True, "prctl(PR_SET_CHILD_SUBREAPER)"),
        "no_new_privs": Capability(True, "prctl(PR_SET_NO_NEW_PRIVS)"),
        "no_capabilities": Capability(True, f"capset; holds now: {_effective_capabilities()}"),
        "rlimits": Capability(True, "setrlimit"),
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
