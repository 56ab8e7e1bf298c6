"""Spawning the worker for one bench: its environment, its process, its output.

`runner.run_bench` hands `spawn_worker` the job; this module starts the worker
(`autokernel.harness.worker`) and brings back its exit status, report bytes and output tail:

- spawned with `subprocess.Popen` (fork + exec of a new interpreter: nothing of this process,
  CUDA context included, is inherited), in a new session, so a wall-clock timeout kills the
  whole process group, grandchildren included; or forked from the fork server
  (`autokernel.harness.forkserver`) when one runs, the same worker either way;
- the job (with the secret seed and nonce) on stdin; the report on a private pipe;
- a scrubbed environment (`candidate_env`): no API keys or other secrets, HOME and TMPDIR in a
  fresh temporary directory, the judge's persistent Triton/Inductor caches (which no candidate
  process reads or writes: each gets fresh private ones);
- the working directory is a temporary directory holding a copy of the kernel file in each
  candidate process's own subdirectory (made and deleted by `run_bench`): the candidate has no
  path into the run's workspace.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from autokernel.harness.forkserver import MODES, RESULT_FD, ForkServer, ForkServerError
from autokernel.harness.sandbox import (
    TREE_MARKER_ENV, hide_from_candidates, kill_process_tree, new_tree_marker,
    unwrapped_c_compiler, wait_unreaped,
)
from autokernel.harness.protocol import Job

OUTPUT_TAIL_BYTES = 16_384
TRUSTED_TRITON_CACHE = "triton-trusted"
TRUSTED_INDUCTOR_CACHE = "inductor-trusted"

# Environment entries the worker keeps (by exact name or prefix), unless they look secret.
KEEP_ENV_NAMES: frozenset[str] = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CC", "CXX",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
})
KEEP_ENV_PREFIXES: tuple[str, ...] = (
    "LC_", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "TORCHINDUCTOR_", "HIP_", "ROCM_", "HSA_",
    "AUTOKERNEL_",
    # NVLink multicast stays off in every process of a multi-GPU run (autokernel.parallel):
    # NCCL_NVLS_ENABLE, NVSHMEM_DISABLE_NVLS (TORCH_SYMM_MEM_DISABLE_MULTICAST is a TORCH_ one).
    "NCCL_", "NVSHMEM_",
)
SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)


def default_cache_dir() -> Path:
    from autokernel.backends.interface import cache_dir

    return cache_dir()


def candidate_env(device: str, workdir: Path, cache_dir: Path) -> dict[str, str]:
    """The worker's environment: the scrubbed parent environment plus private HOME/TMPDIR and
    the persistent compile caches."""
    env = {k: v for k, v in os.environ.items()
           if (k in KEEP_ENV_NAMES or k.startswith(KEEP_ENV_PREFIXES)) and not SECRET_ENV.search(k)}
    home, tmp = workdir / "home", workdir / "tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    env.update({
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "PYTHONDONTWRITEBYTECODE": "1",
        # The judge's caches: only trusted processes write them (each candidate process gets
        # fresh private ones, `worker.private_dirs`). New names: the old "triton" cache was
        # writable from inside the sandbox, and nothing in it is loaded again.
        "TRITON_CACHE_DIR": str(cache_dir / TRUSTED_TRITON_CACHE),
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / TRUSTED_INDUCTOR_CACHE),
        # Compile the torch.compile baseline in-process: no pool of helper processes or threads.
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        # Measured ceilings are per machine, in the user's cache, wherever this run caches.
        "AUTOKERNEL_CACHE_DIR": str(default_cache_dir()),
    })
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
        env.update(_compiler_env(os.environ.get("CC"), os.environ.get("PATH")))
    return env


@functools.cache
def _compiler_env(cc: str | None, path: str | None) -> dict[str, str]:
    """CC, and the variables that stand for its flags, when Triton's C compiler is a wrapper
    script: the program behind it, so the candidate's sandbox need not let the wrapper's shell
    run (`sandbox.unwrapped_c_compiler`). Found once per harness process (it builds a probe),
    keyed by the CC and PATH it was found with."""
    unwrapped = unwrapped_c_compiler()
    return {} if unwrapped is None else {"CC": unwrapped[0], **unwrapped[1]}


class _Drain(threading.Thread):
    """Reads a pipe to EOF, keeping everything (result) or only the tail (candidate output)."""

    def __init__(self, fd: int, keep_tail: int | None) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.keep_tail = keep_tail

    def run(self) -> None:
        try:
            while chunk := os.read(self.fd, 65536):
                self.chunks.append(chunk)
                self.size += len(chunk)
                while self.keep_tail is not None and self.size - len(self.chunks[0]) \
                        >= self.keep_tail:
                    self.size -= len(self.chunks.popleft())
        except OSError:
            pass
        finally:
            os.close(self.fd)

    def data(self) -> bytes:
        raw = b"".join(self.chunks)
        return raw[-self.keep_tail:] if self.keep_tail is not None else raw


def _child_command(mode: str) -> list[str]:
    # -c keeps the worker module importable under its own name (the guards snapshot it), and
    # -P (3.11+) keeps the temporary working directory off sys.path.
    module, _, entry = MODES[mode]
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe_path, "-c", f"from {module} import {entry}; {entry}()"]


def _die_with_parent() -> None:
    """Between fork and exec in the worker: have the kernel SIGKILL it when this process dies.

    The worker runs in its own session (so a timeout can kill its whole group), which also means
    nothing else ends it if autokernel itself is killed (kill -9, a crash): a hanging candidate
    would spin on the GPU forever. Linux's parent-death signal closes that gap.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


_FORK_SERVERS: dict[tuple[str, str, str], ForkServer | None] = {}


def _fork_server(env: dict[str, str], mode: str) -> ForkServer | None:
    """This process's fork server for `mode` and the environment's device, started on first
    use; None when it cannot run (the caller then spawns). Set AUTOKERNEL_FORK_SERVER=0 to never
    use one."""
    if os.environ.get("AUTOKERNEL_FORK_SERVER", "1") == "0" or not sys.platform.startswith("linux"):
        return None
    key = (mode, env.get("TRITON_INTERPRET", ""), sys.executable)
    server = _FORK_SERVERS.get(key)
    if server is not None and server.process.poll() is None:
        return server
    if key in _FORK_SERVERS and server is None:
        return None  # it could not start here: do not pay for trying on every call
    if not _FORK_SERVERS:
        atexit.register(_close_fork_servers)
    try:
        server = ForkServer(env, mode)
    except (ForkServerError, OSError, ValueError):
        server = None
    _FORK_SERVERS[key] = server
    return server


def _close_fork_servers() -> None:
    for server in _FORK_SERVERS.values():
        if server is not None:
            server.close()
    _FORK_SERVERS.clear()


def spawn_worker(job: Job, env: dict[str, str], cwd: Path,
                 timeout_s: float) -> tuple[int | None, bytes, str, bool]:
    """Run one worker: (returncode, result bytes, output tail, timed out). Forked from the fork
    server when one runs (seconds saved per call), else spawned; the same worker either way."""

    def job_text(result_fd: int) -> bytes:
        job.result_fd = result_fd
        return job.to_json().encode()

    return run_child("worker", job_text, env, cwd, timeout_s)


def run_child(mode: str, stdin_for: Callable[[int], bytes], env: dict[str, str], cwd: Path,
              timeout_s: float, per_call_env: tuple[str, ...] = ("HOME", "TMPDIR"),
              ) -> tuple[int | None, bytes, str, bool]:
    """Run one child of `mode` (`forkserver.MODES`) in `cwd`: (returncode, result bytes, output
    tail, timed out). `stdin_for(fd)` is what it reads on stdin, given the number its result
    pipe has there. Forked from the mode's fork server when one runs, else spawned; the same
    code either way. `per_call_env` names the entries that differ from call to call (kept out
    of the server's own environment)."""
    # This process holds the user's whole environment (API keys): no candidate may read it.
    hide_from_candidates()
    server = _fork_server({k: v for k, v in env.items() if k not in per_call_env}, mode)
    # Every process the worker starts carries the marker, so the sweep after the verdict finds
    # it even if it left the worker's session (sandbox.kill_process_tree).
    marker = new_tree_marker()
    env = {**env, TREE_MARKER_ENV: marker}
    if server is not None:
        try:
            return _run_forked(server, stdin_for, env, cwd, timeout_s, marker)
        except ForkServerError:
            _close_fork_servers()  # spawn this one; the next call tries a fresh server
    read_fd, write_fd = os.pipe()
    payload = stdin_for(write_fd)
    try:
        proc = subprocess.Popen(
            _child_command(mode), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, cwd=cwd, env=env, pass_fds=(write_fd,),
            start_new_session=True, close_fds=True, preexec_fn=_die_with_parent,
        )
    finally:
        os.close(write_fd)
    assert proc.stdin is not None and proc.stdout is not None
    result = _Drain(read_fd, None)
    output = _Drain(os.dup(proc.stdout.fileno()), OUTPUT_TAIL_BYTES)
    proc.stdout.close()
    result.start()
    output.start()
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    try:
        # Not reaped yet: while the worker's pid cannot be reused, its session is safe to sweep.
        timed_out = not wait_unreaped(proc.pid, timeout_s)
    finally:
        # The whole tree: a worker that timed out, or anything it left behind.
        kill_process_tree(proc.pid, marker)
        proc.wait()
    result.join(timeout=10)
    output.join(timeout=10)
    tail = output.data().decode("utf-8", "replace")
    return proc.returncode, result.data(), tail, timed_out


def _run_forked(server: ForkServer, stdin_for: Callable[[int], bytes], env: dict[str, str],
                cwd: Path, timeout_s: float, marker: str) -> tuple[int | None, bytes, str, bool]:
    stdin_read, stdin_write = os.pipe()
    output_read, output_write = os.pipe()
    result_read, result_write = os.pipe()
    payload = stdin_for(RESULT_FD)
    try:
        worker = server.fork(str(cwd), env, stdin_read, output_write, result_write)
    except BaseException:
        for fd in (stdin_write, output_read, result_read):
            os.close(fd)
        raise
    finally:
        for fd in (stdin_read, output_write, result_write):
            os.close(fd)
    result = _Drain(result_read, None)
    output = _Drain(output_read, OUTPUT_TAIL_BYTES)
    result.start()
    output.start()
    try:
        with os.fdopen(stdin_write, "wb") as stdin:
            stdin.write(payload)
    except BrokenPipeError:
        pass
    try:
        returncode = worker.wait(timeout_s)
    finally:  # also on a second Ctrl-C, which aborts the wait: the worker must not outlive it
        # The whole tree: a worker that timed out, or anything it left behind.
        kill_process_tree(worker.pid, marker)
    timed_out = returncode is None
    if timed_out:
        returncode = worker.wait(30)
    result.join(timeout=10)
    output.join(timeout=10)
    return returncode, result.data(), output.data().decode("utf-8", "replace"), timed_out
