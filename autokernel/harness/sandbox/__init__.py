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
- `rlimits`: address space (CPU), file size, tasks, open files, no core dumps (`reads`).
- `landlock_fs` (Landlock, kernel >= 5.13): reads only of `readable` when given
  (`candidate_readable`: the installs, its directory, /dev, /proc/self; `/proc/self` is bound to
  the process's own /proc/<pid>, so no other process's environ is readable); writes (create,
  delete, rename, truncate) only beneath `work_dir` and `writable` (and /dev/null, and the
  GPU's device files for `device="cuda"`); execution only of `executables` and what they need
  to run (their ELF interpreter, ld.so; for a `#!` script, its interpreter and the programs it
  names).
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

One module per layer or job: `layers` (the layers by name; `SandboxState`), `syscalls` (prctl
and raw syscalls), `privileges` (subreaper, capabilities, dumpability), `landlock`, `seccomp`,
`executables` (what the candidate may run), `compiler` (an unwrapped compiler wrapper, the
toolchain probe), `availability` (for `autokernel doctor`), `confine` (applying every layer) and
`tree` (the spawner's sweep). Import the names from this package.
"""

from autokernel.harness.sandbox.availability import sandbox_capabilities
from autokernel.harness.sandbox.compiler import (
    PROBE_SOURCE, toolchain_check, toolchain_probe, unwrapped_c_compiler,
)
from autokernel.harness.sandbox.confine import apply_candidate_sandbox, observed_confinement
from autokernel.harness.sandbox.executables import (
    EXTRA_EXEC_ENV, c_compiler_programs, elf_interpreter, extra_executables, program_closure,
    script_programs, toolchain_executables, warm_triton_driver,
)
from autokernel.harness.sandbox.landlock import (
    LANDLOCK_ABI_LINUX, LANDLOCK_NET_ABI, LANDLOCK_SCOPE_ABI, LANDLOCK_TSYNC_ABI, landlock_abi,
)
from autokernel.harness.sandbox.layers import CANDIDATE_FEATURES, FEATURES, Capability, SandboxState
from autokernel.harness.sandbox.reads import apply_limits, candidate_readable
from autokernel.harness.sandbox.privileges import (
    become_subreaper, drop_capabilities, hide_from_candidates, is_dumpable, show_to_self,
)
from autokernel.harness.sandbox.seccomp import (
    CLONE_DENIED_FLAGS, SECCOMP_DENIED, SECCOMP_DENIED_WITHOUT_EXEC,
)
from autokernel.harness.sandbox.tree import (
    TREE_MARKER_ENV, kill_process_tree, new_tree_marker, tree_members, wait_unreaped,
)

__all__ = [
    "CANDIDATE_FEATURES", "CLONE_DENIED_FLAGS", "EXTRA_EXEC_ENV", "FEATURES", "LANDLOCK_ABI_LINUX",
    "LANDLOCK_NET_ABI", "LANDLOCK_SCOPE_ABI", "LANDLOCK_TSYNC_ABI", "PROBE_SOURCE",
    "SECCOMP_DENIED", "SECCOMP_DENIED_WITHOUT_EXEC", "TREE_MARKER_ENV", "Capability",
    "SandboxState", "apply_candidate_sandbox", "apply_limits", "candidate_readable",
    "become_subreaper", "c_compiler_programs",
    "drop_capabilities", "elf_interpreter", "extra_executables", "hide_from_candidates",
    "is_dumpable", "kill_process_tree", "landlock_abi", "new_tree_marker", "observed_confinement",
    "program_closure", "sandbox_capabilities", "script_programs", "show_to_self",
    "toolchain_check", "toolchain_executables", "toolchain_probe", "tree_members",
    "unwrapped_c_compiler", "wait_unreaped", "warm_triton_driver",
]
