"""What the candidate process may read once sandboxed, and the resource limits it runs under.

Reads (Landlock): its own directory (the kernel file, its private Triton cache, its temporary
files), the Python installation and every package directory (torch, Triton, numpy and the rest
import lazily; the autokernel package itself, wherever it is installed), `/dev` (the GPU's device
files, `/dev/urandom`, `/dev/shm` for CUDA IPC) and `/proc/self` (Landlock binds it to this
process's own /proc/<pid> when the ruleset is made: every other process's /proc entries, their
`environ` among them, stay closed, whoever owns them). On a GPU also what the compiler toolchain
and the CUDA runtime read: `/usr`, `/etc/ld.so.cache`, `/sys`, `/proc/driver`, and the C
compiler's own install and search directories wherever it lives (`toolchain_reads`). Nothing else:
no home directory, no workspace, no other job's files.

Limits (`setrlimit`): address space (on the CPU only: CUDA reserves terabytes of virtual
addresses), the size of any file it writes, the number of tasks its user may have, open files,
and no core dumps.
"""

from __future__ import annotations

import resource
import site
import sys
import sysconfig
from pathlib import Path

from autokernel.harness.sandbox.compiler import toolchain_reads

# Limits the candidate process runs under (soft and hard alike, so it cannot raise them).
MAX_FILE_BYTES = 1 << 30
MAX_OPEN_FILES = 4096
MAX_TASKS = 4096
ADDRESS_SPACE_HEADROOM = 16 << 30  # beyond what the process has mapped when it is confined

CUDA_READS = ("/usr", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/sys",
              "/proc/driver", "/opt/nvidia", "/usr/local/cuda")


def candidate_readable(work_dir: Path, device: str) -> list[Path]:
    """The paths the candidate process may read (see the module docstring)."""
    import autokernel

    places = {Path(work_dir), Path("/dev"), Path("/proc/self"),
              Path(autokernel.__file__).resolve().parent}
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        places.add(Path(prefix))
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "include", "platinclude"):
        path = sysconfig.get_paths().get(key)
        if path:
            places.add(Path(path))
    places.update(Path(p) for p in site.getsitepackages())
    places.update(Path(p) for p in sys.path if p and Path(p).is_dir() and
                  ("site-packages" in p or "dist-packages" in p or p.startswith(sys.base_prefix)))
    if device == "cuda":
        places.update(Path(p) for p in CUDA_READS)
        places.update(toolchain_reads())
    found = []
    for place in places:
        for form in {place, place.resolve()} if place.exists() else ():
            found.append(form)
    return sorted(set(found))


def _mapped_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def apply_limits(device: str) -> str:
    """Set the candidate's resource limits; returns what was set, for the sandbox state."""
    limits = [(resource.RLIMIT_FSIZE, MAX_FILE_BYTES, f"files up to {MAX_FILE_BYTES >> 20} MiB"),
              (resource.RLIMIT_NOFILE, MAX_OPEN_FILES, f"{MAX_OPEN_FILES} open files"),
              (resource.RLIMIT_NPROC, MAX_TASKS, f"{MAX_TASKS} tasks for its user"),
              (resource.RLIMIT_CORE, 0, "no core dumps")]
    if device != "cuda":
        space = _mapped_bytes() + ADDRESS_SPACE_HEADROOM
        limits.append((resource.RLIMIT_AS, space, f"{space >> 30} GiB of address space"))
    said = []
    for kind, value, text in limits:
        soft, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        if kind == resource.RLIMIT_NOFILE:
            value = max(value, soft if soft != resource.RLIM_INFINITY else 0)
        resource.setrlimit(kind, (value, value))
        said.append(text)
    return ", ".join(said)
