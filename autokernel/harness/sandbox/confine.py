"""Applying every layer to the candidate process, in order, and reading back from /proc what
confinement a process shows."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from autokernel.harness.sandbox.landlock import _apply_landlock, _import_landlock, landlock_abi
from autokernel.harness.sandbox.layers import CANDIDATE_FEATURES, SandboxState
from autokernel.harness.sandbox.privileges import become_subreaper, drop_capabilities
from autokernel.harness.sandbox.reads import apply_limits
from autokernel.harness.sandbox.seccomp import (
    _apply_seccomp, _import_seccomp, _seccomp_kernel_support,
)
from autokernel.harness.sandbox.syscalls import PR_SET_NO_NEW_PRIVS, _prctl


def apply_candidate_sandbox(work_dir: Path, writable: Iterable[Path],
                            executables: Iterable[Path], device: str, *,
                            isolate_abstract_sockets: bool = False,
                            readable: Iterable[Path] | None = None) -> SandboxState:
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
    reads = None if readable is None else [Path(p) for p in readable] + writable + [work_dir] \
        + [e for program in executables for e in (program, program.parent)]
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
        state.applied["rlimits"] = apply_limits(device)
    except (OSError, ValueError) as exc:
        state.missing["rlimits"] = f"setrlimit failed: {exc}"
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
                            isolate_abstract_sockets, reads)
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
