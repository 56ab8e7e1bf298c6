"""The sandbox's layers by name, and how their availability and applied state are told."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

FEATURES: dict[str, str] = {
    "subreaper": "orphans below the candidate stay in its tree (PR_SET_CHILD_SUBREAPER)",
    "no_new_privs": "nothing it executes gains privileges (PR_SET_NO_NEW_PRIVS)",
    "no_capabilities": "no capability, so a root candidate cannot read the judge's memory "
                       "(capset, PR_CAPBSET_DROP)",
    "rlimits": "limits on address space (CPU), file size, tasks and open files (setrlimit)",
    "landlock_fs": "reads only of the installs, its directory, /dev and /proc/self; writes only "
                   "in its directories; execution only of the toolchain (Landlock)",
    "landlock_net": "no TCP bind or connect (Landlock ABI >= 4)",
    "landlock_signals": "no signals to processes outside the sandbox (Landlock ABI >= 6)",
    "seccomp": "no fork, setsid/setpgid, ptrace, non-unix sockets, io_uring, chmod/chown, "
               "or root's privileged syscalls (seccomp)",
    "tree_sweep": "the spawner can find and kill the candidate's whole process tree (/proc)",
}
CANDIDATE_FEATURES = tuple(name for name in FEATURES if name != "tree_sweep")


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

